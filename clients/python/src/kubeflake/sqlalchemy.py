"""IDs from kubeflake as SQLAlchemy column defaults (needs SQLAlchemy 2).

    from kubeflake.sqlalchemy import id_column
    class Order(Base):
        __tablename__ = "orders"
        id: Mapped[int] = id_column(ids)

The default is a Python-side callable, so SQLAlchemy calls it once per row, also for
`session.add_all` and executemany inserts: every row of a batch gets its own ID, taken
from the client's buffer.
"""

from __future__ import annotations

try:
    from sqlalchemy import BigInteger
    from sqlalchemy.orm import mapped_column
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("kubeflake.sqlalchemy needs SQLAlchemy 2: pip install 'kubeflake[sqlalchemy]'") from e


def id_default(client):
    """A zero-argument callable for `Column(default=...)`: the client's next ID."""

    def next_id() -> int:
        return client.next()

    return next_id


def id_column(client, *, primary_key: bool = True, **kwargs):
    """A BIGINT `mapped_column` whose value comes from `client` when the row has none."""
    return mapped_column(BigInteger, primary_key=primary_key, autoincrement=False,
                         default=id_default(client), **kwargs)
