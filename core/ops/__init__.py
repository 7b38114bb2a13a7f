"""The ops surface: the one door of core for `server/` (and the console through it).

`OperatorTools` (`runtime.ops`) holds what operators do and read. The few kernel
and fleet names a server needs to serve the ops channel and object sockets are
offered here too, so that `server/` imports nothing of core's insides.
"""

from alarmtop.core.fleet.links import NodeClient
from alarmtop.core.fleet.sockets import CLOSE_MOVED, NODE_GONE, takes_sockets
from alarmtop.core.kernel.objects.sockets import HibernatableWebSocket
from alarmtop.core.kernel.supervisor import Supervisor, patience
from alarmtop.core.ops.tools import OperatorTools

__all__ = [
    "CLOSE_MOVED", "NODE_GONE", "HibernatableWebSocket", "NodeClient", "OperatorTools",
    "Supervisor", "patience", "takes_sockets",
]
