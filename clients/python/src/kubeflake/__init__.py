"""kubeflake: IDs from the kubeflake sidecar at memory speed (clients/SPEC.md).

    import kubeflake
    ids = kubeflake.Client()      # KUBEFLAKE_SOCKET, else KUBEFLAKE_URL
    order_id = ids.next()

Asyncio: kubeflake.aio.AsyncClient. Prometheus: kubeflake.prometheus. SQLAlchemy column
defaults: kubeflake.sqlalchemy.
"""

from .client import Client, Stats
from .errors import (BadRequest, ClockBehind, Exhausted, KubeflakeError, NoSidecar, ProtocolError,
                     Refused, SlotLost)
from .layout import Decoded, Layout

__all__ = [
    "Client", "Stats", "Decoded", "Layout", "KubeflakeError", "BadRequest", "Refused",
    "ClockBehind", "SlotLost", "Exhausted", "NoSidecar", "ProtocolError",
]
