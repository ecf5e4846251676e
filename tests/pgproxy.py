"""A TCP proxy in front of the machine's PostgreSQL that a test can cut and restore.

Less disruptive than restarting the shared server (other people's tests use it): ``cut()``
closes every proxied connection and refuses new ones, as a database that went away looks
to gatewayd; ``restore()`` accepts again on the same port.

Two quieter faults: ``blackhole()`` stops forwarding on the connections open now without
closing them (a NAT or load balancer that dropped an idle connection: no FIN, no RST,
nothing ever answers), while new connections work; ``lose_reply_to(marker)`` lets the
next message containing ``marker`` (e.g. ``b"COMMIT"``) reach the database, then drops
the answer and closes that client connection (the commit happened; the client cannot know).

And a partition: ``partition()`` black-holes everything, the connections open now and every
new one (accepted, never forwarded, never closed: a network that drops packets, or a frozen
primary, as a client sees it); ``heal()`` forwards new connections again. The connections
silenced meanwhile stay silent (their state is lost, as in a NAT that forgot them): the
client has to notice and replace them.
"""

from __future__ import annotations

import socket
import threading

TARGET = ("127.0.0.1", 5432)


class _Pair:
    """One proxied connection and what is being done to it."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.blackholed = False  # nothing forwarded either way, nothing closed
        self.muted = False  # the database's answers are dropped
        self.commit_armed = False  # hold_commit_after: the marker passed; the next COMMIT is muted


class Proxy:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._pairs: list[_Pair] = []
        self._lose_marker: bytes | None = None
        self._commit_marker: bytes | None = None
        self._partitioned = False
        self._listener: socket.socket | None = None
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.restore()

    def restore(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, []
            self._pairs = []
        if listener is not None:
            try:
                listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() blocked on it (close alone does not)
            except OSError:
                pass
            listener.close()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()

    def close(self) -> None:
        self.cut()

    def blackhole(self) -> int:
        """Silence every connection open now (new ones are forwarded as usual); how many."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            pair.blackholed = True
        return len(pairs)

    def partition(self) -> int:
        """Black-hole every connection, open now or accepted from now on, until ``heal()``."""
        with self._lock:
            self._partitioned = True
        return self.blackhole()

    def heal(self) -> None:
        """New connections are forwarded again (the ones silenced stay silent)."""
        with self._lock:
            self._partitioned = False

    def lose_reply_to(self, marker: bytes) -> None:
        """Arm: the next client message containing ``marker`` is delivered, its answer is not."""
        with self._lock:
            self._lose_marker = marker

    def hold_commit_after(self, marker: bytes) -> None:
        """Arm: on the connection whose next message contains ``marker``, the COMMIT that follows
        reaches the database and its answer (and every later one) never comes back; the
        connection stays open. The transaction is committed; the client waits, not knowing."""
        with self._lock:
            self._commit_marker = marker

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            with self._lock:
                if self._partitioned:
                    pair = _Pair(client, client)
                    pair.blackholed = True
                    self._conns.append(client)
                    threading.Thread(target=self._pump, args=(pair, client, client), daemon=True).start()
                    continue  # accepted, read, never answered (and nothing reaches the database)
            try:
                upstream = socket.create_connection(TARGET, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self._conns += [client, upstream]
                pair = _Pair(client, upstream)
                self._pairs.append(pair)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(pair, a, b), daemon=True).start()

    def _pump(self, pair: _Pair, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if pair.blackholed or (pair.muted and src is pair.upstream):
                    continue
                lose = False
                if src is pair.client and self._lose_marker is not None:
                    with self._lock:
                        if self._lose_marker is not None and self._lose_marker in data:
                            self._lose_marker, lose = None, True
                            pair.muted = True
                if src is pair.client and pair.commit_armed and b"COMMIT" in data:
                    pair.commit_armed, pair.muted = False, True
                elif src is pair.client and self._commit_marker is not None:
                    with self._lock:
                        if self._commit_marker is not None and self._commit_marker in data:
                            self._commit_marker, pair.commit_armed = None, True
                dst.sendall(data)
                if lose:
                    pair.client.shutdown(socket.SHUT_RDWR)  # the client sees the connection drop, no answer
        except OSError:
            pass
        finally:
            # a muted pair keeps its database side open: the message it delivered still runs there
            for s in (src, dst) if not pair.muted else (pair.client,):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
