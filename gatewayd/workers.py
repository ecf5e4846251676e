"""``gatewayd serve --workers N``: N processes on one listening socket and one admin socket.

The parent (the supervisor) binds every listen address and the admin socket, then forks N
workers that inherit them. Each worker is a whole gatewayd instance (its own event loop,
store connections, key cache, instance id and heartbeat) accepting on the shared sockets,
so the kernel hands each new connection to a worker that is waiting in accept. Money,
keys and limits are exact across workers for the same reason they are across machines:
they live in the shared database (or Redis), never in one worker's memory.

Why inherited sockets and not SO_REUSEPORT: the port is resolved once (``:0`` works, and
every worker is on the same port), and a worker that dies takes no queued connections
with it (with SO_REUSEPORT each worker has its own accept queue, whose connections are
reset when it dies). The supervisor restarts a worker that dies, on the same sockets.

The admin socket is shared too: ``gatewayctl`` reaches whichever worker accepts, and a
change made there is in the database before the answer and on every other worker within
the change-propagation delay (see docs/deploy.md). One socket keeps ``gatewayctl``
unchanged for N = 1 and N > 1.

The supervisor is plain blocking code with no threads, so forking from it is safe; it
never runs trio or opens the database. What a worker runs (``gatewayd.server.run``) is
handed in by ``gatewayd serve``: the server imports this module for ``WorkerSockets``, so
this one does not import the server.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import socket
import stat
import sys
import time
from pathlib import Path
from typing import Callable

import attrs

from gatewayd.config import Config, parse_host_port

RESTART_DELAY_S = 1.0
CRASH_LOOP = 5  # this many workers dying within CRASH_WINDOW_S of their start: give up
CRASH_WINDOW_S = 10.0
READY_TIMEOUT_S = 60.0


class WorkersRefused(Exception):
    """``--workers N`` cannot run with this configuration: one line for the operator."""


def check_workers(config: Config, workers: int) -> None:
    if workers < 1:
        raise WorkersRefused(f"--workers must be at least 1 (got {workers})")
    if workers == 1:
        return
    if config.database_url.startswith("sqlite:"):
        raise WorkersRefused(
            f"--workers {workers} needs PostgreSQL ([database] url = \"postgresql://...\" or GATEWAY_DATABASE_URL): "
            "a SQLite database is served by one process"
        )
    if config.demo:
        raise WorkersRefused("--demo runs one process: leave out --workers")


@attrs.frozen
class WorkerSockets:
    """What a forked worker inherits: the listening fds, its number, where to say it is ready."""

    index: int
    listen_fds: tuple[int, ...]
    admin_fd: int
    ready_fd: int
    supervisor_pid: int

    def ready(self, binds: list[str]) -> None:
        os.write(self.ready_fd, f"{self.index} {os.getpid()} {' '.join(binds)}\n".encode())

    def reload_everywhere(self, reload):
        """``gatewayctl reload`` reaches one worker: it reloads, answers, and has the supervisor
        send SIGHUP to every worker (itself included: reloading the same file twice is harmless)."""

        def run(source: str) -> dict:
            result = reload(source)  # a bad config raises here: nothing is sent to the others
            if os.getppid() == self.supervisor_pid:
                os.kill(self.supervisor_pid, signal.SIGHUP)
            return result

        return run

    def metrics_listen(self, listen: str) -> str:
        """Each worker's own metrics listener: ``[server] metrics_listen``'s port + (worker number - 1),
        so a scrape sees one worker's counters, never a mix of whichever worker answered."""
        host, port = parse_host_port(listen)
        if port == 0:
            return listen
        host = f"[{host}]" if ":" in host else host
        return f"{host}:{port + self.index - 1}"


def _listen_socket(listen: str) -> socket.socket:
    host, port = parse_host_port(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _admin_socket(path: str) -> socket.socket:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        if stat.S_ISSOCK(os.stat(path).st_mode):
            os.remove(path)  # stale socket from a previous run
    except FileNotFoundError:
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _term_when_parent_dies(parent: int) -> None:
    """Linux: a supervisor killed with -9 takes its workers with it (SIGTERM: they drain)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the supervisor died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


class Supervisor:
    def __init__(self, config: Config, workers: int, loader, serve_worker: Callable[..., None]) -> None:
        self.config = config
        self.loader = loader
        self.serve_worker = serve_worker
        self.count = workers
        self.children: dict[int, tuple[int, float]] = {}  # pid -> (worker index, start time)
        self.stopping = False
        self.crashes: list[float] = []
        self._ready_buffer = ""  # the start of a readiness line not yet whole (run() starts it empty)

    # -- the worker side --------------------------------------------------------------------

    def _fork(self, index: int) -> int:
        parent = os.getpid()
        pid = os.fork()
        if pid:
            self.children[pid] = (index, time.monotonic())
            return pid
        # the child: a whole gatewayd on the inherited sockets
        code = 1
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGHUP, signal.SIG_DFL)
            _term_when_parent_dies(parent)
            os.close(self.ready_r)
            self.serve_worker(self.config, self.loader, worker=WorkerSockets(
                index=index, listen_fds=tuple(s.fileno() for s in self.listeners), admin_fd=self.admin.fileno(),
                ready_fd=self.ready_w, supervisor_pid=parent,
            ))
            code = 0
        except KeyboardInterrupt:
            code = 0
        except BaseException as e:  # noqa: BLE001 - the worker's last words, then its exit status
            print(f"gatewayd worker {index}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)

    # -- the supervisor side ------------------------------------------------------------------

    def _on_signal(self, signum, frame) -> None:
        if not self.stopping:
            print(f"gatewayd: {signal.Signals(signum).name} received, stopping {len(self.children)} workers",
                  file=sys.stderr, flush=True)
        self._stop()

    def _forward_hup(self, signum, frame) -> None:
        """SIGHUP: every worker re-reads the config (each logs the outcome)."""
        for pid in list(self.children):
            try:
                os.kill(pid, signal.SIGHUP)
            except ProcessLookupError:
                pass

    def _stop(self) -> None:
        self.stopping = True
        for pid in list(self.children):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def _reap(self) -> list[tuple[int, int, float, int]]:
        """Workers that exited: (pid, index, lifetime, exit status)."""
        out = []
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            index, started = self.children.pop(pid)
            out.append((pid, index, time.monotonic() - started, os.waitstatus_to_exitcode(status)))
        return out

    def _read_ready(self, timeout: float) -> list[str]:
        try:
            readable, _, _ = select.select([self.ready_r], [], [], timeout)
        except InterruptedError:
            return []
        if not readable:
            return []
        try:
            data = os.read(self.ready_r, 65536)
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EINTR):
                return []
            raise
        self._ready_buffer += data.decode()
        *lines, self._ready_buffer = self._ready_buffer.split("\n")
        return lines

    def run(self) -> int:
        self.listeners = [_listen_socket(listen) for listen in self.config.server.listen]
        self.admin = _admin_socket(self.config.server.admin_socket)
        self.ready_r, self.ready_w = os.pipe()
        os.set_blocking(self.ready_r, False)
        self._ready_buffer = ""
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGHUP, self._forward_hup)
        sys.stdout.flush()
        for index in range(1, self.count + 1):
            self._fork(index)

        ready: dict[int, str] = {}
        deadline = time.monotonic() + READY_TIMEOUT_S
        announced = False
        code = 0
        while self.children or not self.stopping:
            for line in self._read_ready(0.2):
                _, ready_pid, binds = line.split(" ", 2)
                ready[int(ready_pid)] = binds
            if not announced and len(ready) >= self.count:
                announced = True
                scheme_binds = sorted(set(next(iter(ready.values())).split()))
                print(f"gatewayd listening on {', '.join(scheme_binds)}; admin socket "
                      f"{self.config.server.admin_socket}; {self.count} workers (pids "
                      f"{', '.join(str(p) for p in sorted(self.children))})", flush=True)
            if not announced and not self.stopping and time.monotonic() > deadline:
                print(f"gatewayd: workers not ready after {READY_TIMEOUT_S:g} s; stopping", file=sys.stderr, flush=True)
                code = 1
                self._stop()
            for pid, index, lifetime, status in self._reap():
                ready.pop(pid, None)
                if self.stopping:
                    continue
                print(f"gatewayd: worker {index} (pid {pid}) exited with status {status}", file=sys.stderr, flush=True)
                if not announced:
                    # a worker that cannot start (database unreachable, port taken...): the others would
                    # fail the same way, so stop rather than loop
                    code = 1
                    self._stop()
                    continue
                now = time.monotonic()
                self.crashes = [t for t in self.crashes if now - t < CRASH_WINDOW_S]
                if lifetime < CRASH_WINDOW_S:
                    self.crashes.append(now)
                if len(self.crashes) >= CRASH_LOOP:
                    print(f"gatewayd: {CRASH_LOOP} workers died within {CRASH_WINDOW_S:g} s of starting; stopping",
                          file=sys.stderr, flush=True)
                    code = 1
                    self._stop()
                    continue
                time.sleep(RESTART_DELAY_S)
                if not self.stopping:
                    new = self._fork(index)
                    print(f"gatewayd: worker {index} restarted (pid {new})", file=sys.stderr, flush=True)
        for sock in self.listeners:
            sock.close()
        self.admin.close()
        try:
            os.remove(self.config.server.admin_socket)
        except FileNotFoundError:
            pass
        return code


def run_workers(config: Config, workers: int, loader, serve_worker: Callable[..., None]) -> int:
    """Run ``workers`` instances until SIGTERM/SIGINT; returns the exit status. Each forked
    worker calls ``serve_worker(config, loader, worker=WorkerSockets(...))``."""
    return Supervisor(config, workers, loader, serve_worker).run()
