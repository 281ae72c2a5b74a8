"""The Prometheus collector and the SQLAlchemy column default."""

import pytest

import kubeflake

prometheus_client = pytest.importorskip("prometheus_client", reason="install with clients/python/test.sh")
sqlalchemy = pytest.importorskip("sqlalchemy", reason="install with clients/python/test.sh")


def test_the_collector_exposes_the_buffer_under_the_shared_names(sidecar):
    from kubeflake.prometheus import ClientCollector

    registry = prometheus_client.CollectorRegistry()
    with kubeflake.Client(url=sidecar.url) as ids:
        ids.next()
        registry.register(ClientCollector(ids, name="orders"))
        text = prometheus_client.generate_latest(registry).decode()
    assert 'kubeflake_client_refills_total{client="orders"} 1.0' in text
    assert 'kubeflake_client_ids_total{client="orders"} 1.0' in text
    for name in ("kubeflake_client_buffer_depth", "kubeflake_client_waits_total",
                 "kubeflake_client_refill_seconds_total", "kubeflake_client_expired_total"):
        assert name in text


def test_sqlalchemy_rows_get_ids_from_the_sidecar_also_in_a_batch_insert(sidecar, tmp_path):
    from sqlalchemy import String, create_engine, insert, select
    from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

    from kubeflake.sqlalchemy import id_column

    with kubeflake.Client(url=sidecar.url) as ids:
        class Base(DeclarativeBase):
            pass

        class Order(Base):
            __tablename__ = "orders"
            id: Mapped[int] = id_column(ids)
            item: Mapped[str] = mapped_column(String(40))

        engine = create_engine(f"sqlite:///{tmp_path / 'shop.db'}")
        Base.metadata.create_all(engine)
        with Session(engine) as session:
            session.add_all([Order(item=f"unit {n}") for n in range(500)])
            session.commit()
            session.execute(insert(Order), [{"item": f"bulk {n}"} for n in range(500)])
            session.commit()
            rows = session.execute(select(Order.id, Order.item)).all()
        engine.dispose()
        assert len(rows) == 1000
        assert len({r.id for r in rows}) == 1000
        assert all(ids.decode(r.id).worker == 7 for r in rows)
