"""A connection whose client has gone is closed at once, with everything it held.

Hypercorn kept the socket (and the connection's objects) of a client that closed a
kept-alive connection until ``keep_alive_timeout`` (75 s) had passed: a soak with
hang-ups held 600 file descriptors after two minutes (the ``hangups`` patch of ``gatewayd/hypercorn_patches.py``; in-process tests in ``tests/test_hypercorn_patches.py``). These
tests count the daemon's sockets of client connections, from ``/proc``.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.live import Daemon

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads sockets from Linux's /proc")

TCP_LISTEN = "0A"


def client_sockets(pid: int, port: int) -> int:
    """The daemon's open sockets that are client connections to ``port`` (any state but
    listening), plus sockets it holds open whose connection has already ended."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    ours, known = 0, set()
    for table in ("tcp", "tcp6", "udp", "udp6", "unix"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            inode = fields[6] if table == "unix" else fields[9]
            if inode not in inodes:
                continue
            known.add(inode)
            if table.startswith("tcp") and int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] != TCP_LISTEN:
                ours += 1
    return ours + len(inodes - known)


def wait_for_sockets(pid: int, port: int, at_most: int, within_s: float = 5.0) -> int:
    deadline = time.monotonic() + within_s
    while True:
        count = client_sockets(pid, port)
        if count <= at_most or time.monotonic() > deadline:
            return count
        time.sleep(0.05)


def read_answer(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


@pytest.fixture(scope="module")
def gateway(sim, tmp_path_factory):
    """A daemon of its own: the session's is shared with clients of other test files that
    may still hold kept-alive connections to it."""
    daemon = Daemon(tmp_path_factory.mktemp("hangups"), sim.url)
    yield daemon
    daemon.stop()


@pytest.fixture
def address(gateway):
    url = urlsplit(gateway.url)
    assert wait_for_sockets(gateway.proc.pid, url.port, 0) == 0
    return url.hostname, url.port


def test_idle_connections_closed_by_their_clients_are_freed_at_once(gateway, address):
    connections = []
    for _ in range(30):
        sock = socket.create_connection(address)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
        assert read_answer(sock).startswith(b"HTTP/1.1 200")
        connections.append(sock)
    assert client_sockets(gateway.proc.pid, address[1]) == 30
    time.sleep(0.3)  # the answers are done: every connection is idle, kept alive
    for sock in connections:
        sock.close()
    assert wait_for_sockets(gateway.proc.pid, address[1], 0) == 0


def test_a_client_that_hangs_up_mid_stream_leaves_no_socket_behind(gateway, funded, address):
    _, _, secret = funded
    body = (b'{"model": "gpt-4.1-mini", "stream": true, "messages": [{"role": "user", "content":'
            b' "[[sim:words=200]] [[sim:fault=chunk_delay_ms:20]] go"}]}')
    for _ in range(5):
        sock = socket.create_connection(address)
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
                     b"Authorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s" % (secret.encode(), len(body), body))
        assert read_answer(sock).startswith(b"HTTP/1.1 200")
        sock.close()
    assert wait_for_sockets(gateway.proc.pid, address[1], 0) == 0


def test_clients_that_reset_while_their_answer_is_finished_leave_no_socket_behind(gateway, funded, address):
    """A reset that arrives while the answer is being completed ended the read loop first; the
    finished answer then began a new keep-alive cycle, with a new 75 s timer, on a dead socket."""
    import random
    import struct

    _, _, secret = funded
    body = b'{"model": "gpt-4.1-mini", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}'
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
               b"Authorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s" % (secret.encode(), len(body), body))
    rng = random.Random(7)
    for _ in range(150):
        sock = socket.create_connection(address)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close() sends a reset
        sock.sendall(request)
        time.sleep(rng.uniform(0, 0.004))
        sock.close()
    assert wait_for_sockets(gateway.proc.pid, address[1], 0) == 0
