"""Close a connection as soon as its client has gone, not ``keep_alive_timeout`` later.

Hypercorn's trio ``TCPServer`` runs a connection's request tasks and its keep-alive idle
timer in one task group, and closes the socket only when that group ends. When a client
closes a kept-alive connection (what every HTTP client's pool does with idle connections,
and what clients that open a connection per request do after each answer), the read loop
ends but the idle timer keeps waiting out ``keep_alive_timeout`` (75 s here, above the
idle timeouts of the proxies in front): the socket and every object of the connection
stayed for 75 s. A soak found 600 such file descriptors and ~10 MB after two minutes of
traffic with hang-ups; at a few hundred new connections a second they reach the
process's file limit and the listener stops accepting.

Once the read side has ended no further request can arrive, so the idle timer has
nothing left to guard: ``install`` stops it there. Requests still running finish (they
have already been told the client disconnected) and then hypercorn closes the socket as
it always does. Checked with hypercorn 0.17-0.18; without the method, nothing changes.
"""

from __future__ import annotations


def install() -> bool:
    """Patch hypercorn's trio TCP server once; True if it was (or already is) patched."""
    try:
        from hypercorn.trio.tcp_server import TCPServer
    except ImportError:  # pragma: no cover
        return False
    original = getattr(TCPServer, "_read_data", None)
    if original is None:
        return False
    if getattr(original, "_gatewayd", False):
        return True

    async def _read_data(self) -> None:
        await original(self)  # returns once the client closed (or the stream broke)
        await self.idle_task.stop()

    _read_data._gatewayd = True  # type: ignore[attr-defined]
    TCPServer._read_data = _read_data  # type: ignore[method-assign]
    return True
