"""Close a connection as soon as its client has gone, not ``keep_alive_timeout`` later.

Hypercorn's trio ``TCPServer`` runs a connection's request tasks and its keep-alive idle
timer in one task group, and closes the socket only when that group ends. When a client
closes a kept-alive connection (what every HTTP client's pool does with idle connections,
and what clients that open a connection per request do after each answer), the read loop
ends but the idle timer keeps waiting out ``keep_alive_timeout`` (75 s here, above the
idle timeouts of the proxies in front): the socket and every object of the connection
stayed for 75 s. The same happened when a client reset the connection while its answer
was being finished: the read loop ended on the reset, then the finished answer started a
new keep-alive cycle and with it a new 75 s timer. A soak found 600 such file descriptors
and ~10 MB after two minutes of traffic with hang-ups; at a few hundred new connections a
second they reach the process's file limit and the listener stops accepting.

Once the read side has ended no further request can arrive, so the idle timer has
nothing left to guard: ``install`` stops it there, and a timer started after that closes
the connection at once. Requests still running finish (they have already been told the
client disconnected) and then hypercorn closes the socket as it always does. Checked with
hypercorn 0.17-0.18; without these methods, nothing changes.
"""

from __future__ import annotations

import trio


def install() -> bool:
    """Patch hypercorn's trio TCP server once; True if it was (or already is) patched."""
    try:
        from hypercorn.trio.tcp_server import TCPServer
    except ImportError:  # pragma: no cover
        return False
    read_data = getattr(TCPServer, "_read_data", None)
    idle_timeout = getattr(TCPServer, "_idle_timeout", None)
    if read_data is None or idle_timeout is None or not hasattr(TCPServer, "_initiate_server_close"):
        return False
    if getattr(read_data, "_gatewayd", False):
        return True

    async def _read_data(self) -> None:
        await read_data(self)  # returns once the client closed (or the stream broke)
        self.gatewayd_peer_gone = True
        await self.idle_task.stop()

    async def _idle_timeout(self) -> None:
        if not getattr(self, "gatewayd_peer_gone", False):
            await idle_timeout(self)
            return
        # a keep-alive cycle begun after the client left (its answer finished after a reset)
        with trio.CancelScope(shield=True):
            await self._initiate_server_close()

    _read_data._gatewayd = True  # type: ignore[attr-defined]
    TCPServer._read_data = _read_data  # type: ignore[method-assign]
    TCPServer._idle_timeout = _idle_timeout  # type: ignore[method-assign]
    return True
