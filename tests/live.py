"""Live-test harness: real processes on loopback, real files, real sockets.

``GATEWAY_TEST_DATABASE=postgres`` runs every ``Daemon`` on a database of its own made on
the machine's PostgreSQL (127.0.0.1:5432) and dropped when the run ends (tests/pg.py).

``Sim`` runs ``gatewayd simulate``; ``Daemon`` runs ``gatewayd serve`` with a config
that points every provider at that simulator; ``Admin`` speaks the admin API over the
daemon's Unix socket. Nothing here is mocked: the tests see what an operator would.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
CATALOGUE = ROOT / "gatewayd" / "data" / "catalogue.toml"
BIN = Path(sys.executable).parent


class _Reader(threading.Thread):
    """Keeps a child's stdout drained and remembers it (for the listening line, and for failures)."""

    def __init__(self, stream) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.lines: list[str] = []
        self.changed = threading.Condition()

    def run(self) -> None:
        for line in iter(self.stream.readline, ""):
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()

    def wait_for(self, pattern: str, timeout: float, proc: subprocess.Popen) -> re.Match:
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        with self.changed:
            while True:
                for line in self.lines:
                    match = regex.search(line)
                    if match:
                        return match
                if proc.poll() is not None:
                    raise RuntimeError(f"process exited {proc.returncode}:\n{''.join(self.lines)}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"no line matching {pattern!r}:\n{''.join(self.lines)}")
                self.changed.wait(remaining)

    @property
    def text(self) -> str:
        return "".join(self.lines)


def _spawn(args: list[str], env: dict | None = None) -> tuple[subprocess.Popen, _Reader]:
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )
    reader = _Reader(proc.stdout)
    reader.start()
    return proc, reader


class Sim:
    def __init__(self) -> None:
        self.proc, self.output = _spawn([str(BIN / "gatewayd"), "simulate", "--listen", "127.0.0.1:0"])
        match = self.output.wait_for(r"listening on (http://[\d.]+:\d+)", 30, self.proc)
        self.url = match.group(1)
        self.http = httpx.Client(base_url=self.url, timeout=10)

    def requests(self, contains: str | None = None) -> list[dict]:
        params = {"contains": contains} if contains else {}
        return self.http.get("/_sim/requests", params=params).json()

    def last_request(self, contains: str) -> dict:
        found = self.requests(contains)
        assert found, f"the simulator received no request containing {contains!r}"
        return found[-1]

    def stop(self) -> None:
        self.http.close()
        self.proc.terminate()
        self.proc.wait(10)


def catalogue_pointed_at(sim_url: str, extra: str = "") -> str:
    """The default catalogue with every provider's base_url replaced by the simulator's."""
    text = CATALOGUE.read_text()
    text = re.sub(r'base_url = "https://api\.anthropic\.com"', f'base_url = "{sim_url}"', text)
    text = re.sub(r'base_url = "https://[^"]+/v1"', f'base_url = "{sim_url}/v1"', text)
    text = re.sub(r'base_url = "https://[^"]+/v1beta"', f'base_url = "{sim_url}/v1beta"', text)
    text = re.sub(r'api_key_env = "[A-Z_]+"', 'api_key = "sim-provider-key"', text)
    return text + "\n" + extra


class Daemon:
    def __init__(self, workdir: Path, sim_url: str, *, server: str = "", extra: str = "", args=(), env=None) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.socket = str(workdir / "admin.sock")
        self.config = workdir / "gatewayd.toml"
        if "shutdown_grace_s" not in server:
            # hypercorn keeps idle keep-alive connections until the grace period ends: keep teardown quick
            server += "\nshutdown_grace_s = 2\n"
        self.config.write_text(
            f'[server]\nlisten = "127.0.0.1:0"\ndata_dir = "{workdir / "data"}"\n'
            f'admin_socket = "{self.socket}"\n{server}\n' + catalogue_pointed_at(sim_url, extra)
        )
        self.args = list(args)
        self.env = dict(env or {})
        self.database: str | None = None
        if (os.environ.get("GATEWAY_TEST_DATABASE") == "postgres" and "GATEWAY_DATABASE_URL" not in self.env
                and "[database]" not in extra):
            # the live suite on PostgreSQL: a fresh database per daemon, dropped at the end of the run
            from tests import pg

            self.database, url = pg.create_database()
            self.env["GATEWAY_DATABASE_URL"] = url
        self.start()

    def start(self) -> None:
        self.proc, self.output = _spawn(
            [str(BIN / "gatewayd"), "serve", "--config", str(self.config), *self.args], env=self.env
        )
        match = self.output.wait_for(r"listening on (https?://[\w.\[\]:]+:\d+)", 30, self.proc)
        self.url = match.group(1)
        self.admin = Admin(self.socket)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        self.admin.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def restart(self) -> None:
        self.stop()
        self.start()


class Admin:
    """The admin API over the Unix socket, returning parsed JSON (raising on errors)."""

    def __init__(self, socket_path: str) -> None:
        self.http = httpx.Client(transport=httpx.HTTPTransport(uds=socket_path), base_url="http://gatewayd",
                                 timeout=30)

    def call(self, method: str, path: str, json=None, expect: int | None = None):
        response = self.http.request(method, "/admin/v1" + path, json=json)
        if expect is not None:
            assert response.status_code == expect, response.text
        elif response.status_code >= 400:
            raise AssertionError(f"{method} {path} -> {response.status_code}: {response.text}")
        return response.json()

    def account(self, email: str, *, paid_usd: str | None = "10", timezone: str = "UTC") -> dict:
        account = self.call("POST", "/accounts", {"email": email, "timezone": timezone})
        if paid_usd:
            from gatewayd.money import usd_to_nano

            self.call("POST", f"/accounts/{account['id']}/payments", {"amount_nano": usd_to_nano(paid_usd)})
        return self.call("GET", f"/accounts/{account['id']}")

    def key(self, account_id: str, name: str = "test", **fields) -> dict:
        return self.call("POST", f"/accounts/{account_id}/keys", {"name": name, **fields})

    def balance(self, account_id: str) -> dict:
        """The three integers (the answer's ``*_usd`` strings beside them are derived from them:
        tests/test_admin_http.py checks those)."""
        doc = self.call("GET", f"/accounts/{account_id}/balance")
        return {name: value for name, value in doc.items() if not name.endswith("_usd")}

    def usage(self, account_id: str, limit: int = 50) -> list[dict]:
        return self.call("GET", f"/accounts/{account_id}/usage?limit={limit}")["data"]

    def audit(self) -> dict:
        return self.call("GET", "/audit")

    def close(self) -> None:
        self.http.close()


_counter = iter(range(1, 1_000_000))


def unique_email(prefix: str = "user") -> str:
    return f"{prefix}-{os.getpid()}-{next(_counter)}-{time.time_ns() % 10**6}@example.com"


NGINX_SNIPPET = ROOT / "docs" / "deploy" / "nginx.conf"


def nginx_binary() -> str | None:
    import shutil

    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Nginx:
    """Debian's nginx running docs/deploy/nginx.conf, its upstream servers replaced by ``upstreams``
    (``host:port`` each) and its ``listen`` by a free loopback port. Only the wrapping main config
    (pid file, logs, temp paths in ``workdir``) is the test's own."""

    def __init__(self, workdir: Path, upstreams: list[str], *, tls: tuple[str, str] | None = None) -> None:
        """``tls``: (certificate chain file, key file): the example's production form, `listen ... ssl`."""
        binary = nginx_binary()
        if binary is None:
            raise RuntimeError("nginx is not installed")
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        snippet = NGINX_SNIPPET.read_text()
        servers = "".join(f"    server {u} max_fails=1 fail_timeout=5s;\n" for u in upstreams)
        snippet, n = re.subn(r"(?m)^    server \d+\.\d+\.\d+\.\d+:\d+ [^\n]*\n", "", snippet)
        assert n == 2, "docs/deploy/nginx.conf: expected two example upstream servers"
        snippet = snippet.replace("upstream gatewayd {\n", "upstream gatewayd {\n" + servers, 1)
        listen = f"listen 127.0.0.1:{self.port};"
        if tls:
            listen = f"listen 127.0.0.1:{self.port} ssl;\n    ssl_certificate {tls[0]};\n    ssl_certificate_key {tls[1]};"
        snippet, n = re.subn(r"(?m)^    listen 80;", f"    {listen}", snippet)
        assert n == 1, "docs/deploy/nginx.conf: expected one `listen 80;`"
        self.access_log = workdir / "gatewayd-access.log"
        # the example's access log in the workdir, beside the test's own (``upstreams_used`` reads it):
        # a server-level access_log replaces the http-level one, so the server gets both
        snippet, n = re.subn(r"access_log /var/log/nginx/gatewayd-access\.log gatewayd_no_query;",
                             f"access_log {self.access_log} gatewayd_no_query;\n    access_log {workdir}/access.log upstream;",
                             snippet)
        assert n == 1, "docs/deploy/nginx.conf: expected its access_log line"
        (workdir / "gatewayd.conf").write_text(snippet)
        temp = workdir / "temp"
        temp.mkdir(exist_ok=True)
        user = "user root;\n" if os.geteuid() == 0 else ""
        (workdir / "nginx.conf").write_text(
            f"{user}worker_processes 1;\npid {workdir}/nginx.pid;\nerror_log {workdir}/error.log warn;\n"
            "daemon off;\nevents { worker_connections 1024; }\n"
            f"http {{\n  log_format upstream '$status $upstream_addr';\n  access_log {workdir}/access.log upstream;\n  client_body_temp_path {temp}/body;\n"
            f"  proxy_temp_path {temp}/proxy;\n  fastcgi_temp_path {temp}/fastcgi;\n  uwsgi_temp_path {temp}/uwsgi;\n"
            f"  scgi_temp_path {temp}/scgi;\n  include {workdir}/gatewayd.conf;\n}}\n"
        )
        self.workdir = workdir
        self.proc, self.output = _spawn([binary, "-p", str(workdir), "-c", str(workdir / "nginx.conf")])
        deadline = time.monotonic() + 20
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nginx exited {self.proc.returncode}:\n{self.output.text}"
                                   f"{(workdir / 'error.log').read_text() if (workdir / 'error.log').exists() else ''}")
            try:
                httpx.get(self.url + "/v1/models", timeout=1, verify=False)  # up yet? (any certificate)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def upstreams_used(self) -> list[str]:
        """The upstream address of every request so far (the test's access log: status, upstream)."""
        path = self.workdir / "access.log"
        return [line.split(" ", 1)[1] for line in path.read_text().splitlines()] if path.exists() else []

    def error_log(self) -> str:
        path = self.workdir / "error.log"
        return path.read_text() if path.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def postgres_ready() -> bool:
    """The PostgreSQL store is built and the machine's server answers (tests that need it skip otherwise)."""
    try:
        import gatewayd.store.postgres  # noqa: F401
    except ImportError:
        return False
    from tests import pg

    return pg.available()
