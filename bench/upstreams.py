"""Upstreams for the benchmarks: a zero-latency nginx serving canned provider answers.

The simulator is a quart-trio server: it spends about as much CPU on a request as the
gateway does, so through it a benchmark measures two Python servers. nginx answers a
canned body in tens of microseconds, which makes it the machine's floor: the same
traffic straight to nginx is what loopback HTTP costs here, and anything above it in
the gateway's figures is the gateway's.

The canned answers are taken from the simulator at the start of the run (a chat
completion and an Anthropic message, each streamed and not), so they are real wire
format; nginx picks the streamed one by the request's ``Accept: text/event-stream``
header, which is how the gateway asks for a stream.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx

PROMPT = "Say hello to the benchmark [[sim:words=30]]"


def capture(sim_url: str) -> dict[str, tuple[bytes, str]]:
    """(body, content type) for chat / chat_stream / messages / messages_stream, from the simulator."""
    out = {}
    with httpx.Client(base_url=sim_url, timeout=10, headers={"authorization": "Bearer sim"}) as http:
        chat = {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 64}
        messages = {"model": "claude-haiku-4-5", "messages": [{"role": "user", "content": PROMPT}],
                    "max_tokens": 64}
        headers = {"anthropic-version": "2023-06-01", "x-api-key": "sim"}
        for name, path, body, hdrs in (
            ("chat", "/v1/chat/completions", chat, {}),
            ("chat_stream", "/v1/chat/completions",
             {**chat, "stream": True, "stream_options": {"include_usage": True}}, {}),
            ("messages", "/v1/messages", messages, headers),
            ("messages_stream", "/v1/messages", {**messages, "stream": True}, headers),
        ):
            r = http.post(path, json=body, headers=hdrs)
            r.raise_for_status()
            out[name] = (r.content, r.headers["content-type"].split(";")[0])
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Nginx:
    """nginx with one worker on 127.0.0.1, answering the canned bodies."""

    def __init__(self, workdir: Path, canned: dict[str, tuple[bytes, str]]) -> None:
        binary = shutil.which("nginx") or "/usr/sbin/nginx"
        if not Path(binary).exists():
            raise FileNotFoundError("nginx is not installed")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "tmp").mkdir(exist_ok=True)
        temps = "\n".join(f"  {kind}_temp_path {workdir / 'tmp' / kind};"
                          for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))

        # POST to a static file is a 405 in nginx; ``error_page 405 =200 $uri`` turns it into a
        # GET of the same file (the request body is read and dropped): a canned answer of any size.
        for kind in ("json", "sse"):
            (workdir / kind).mkdir(exist_ok=True)
        for name, (body, _) in canned.items():
            (workdir / ("sse" if name.endswith("_stream") else "json") / name).write_bytes(body)

        def location(path: str, name: str) -> str:
            return (
                f"    location = {path} {{\n      set $kind json; set $name {name};\n"
                f"      if ($http_accept = \"text/event-stream\") {{ set $kind sse; set $name {name}_stream; }}\n"
                f"      rewrite ^ /_canned/$kind/$name last;\n    }}\n"
            )

        canned_locations = "".join(
            f"    location /_canned/{kind}/ {{\n      internal;\n      alias {workdir / kind}/;\n"
            f"      types {{ }}\n      default_type {ctype};\n      etag off;\n      error_page 405 =200 $uri;\n    }}\n"
            for kind, ctype in (("json", "application/json"), ("sse", "text/event-stream"))
        )
        conf = workdir / "nginx.conf"
        conf.write_text(
            # the worker runs as whoever runs the bench (it reads the canned files in a 0700 temp dir)
            f"user {pwd.getpwuid(os.geteuid()).pw_name};\n"
            f"worker_processes 1;\ndaemon off;\npid {workdir / 'nginx.pid'};\n"
            f"error_log {workdir / 'error.log'} warn;\n"
            "events { worker_connections 8192; }\n"
            "http {\n  access_log off;\n" + temps + "\n"
            "  client_max_body_size 0;\n  keepalive_requests 10000000;\n  keepalive_timeout 300;\n"
            f"  server {{\n    listen 127.0.0.1:{self.port};\n"
            + location("/v1/chat/completions", "chat") + location("/v1/messages", "messages") + canned_locations
            + "  }\n}\n"
        )
        self.proc = subprocess.Popen([binary, "-p", str(workdir), "-c", str(conf), "-e", str(workdir / "error.log")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"nginx did not start: {self.proc.stderr.read().decode()}")
                time.sleep(0.05)

    @property
    def pids(self) -> list[int]:
        """The master and its worker (CPU figures add both)."""
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        return [self.proc.pid, *map(int, children)]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
