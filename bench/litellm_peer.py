"""LiteLLM's proxy as the peer in the same run (``bench/hot_path.py --litellm PATH``).

Issue 15's goals are ratios to LiteLLM measured on the same machine in the same run
(CPU per request at most a tenth of LiteLLM's, streams/s at least 20x). LiteLLM is not
a dependency of gatewayd: install it in a virtual environment of its own and pass its
``litellm`` command, for example::

    python3 -m venv /tmp/litellm && /tmp/litellm/bin/pip install 'litellm[proxy]==1.106.2'
    make bench BENCH_ARGS="--litellm /tmp/litellm/bin/litellm"

It runs with one worker, pinned to the gateway's core, routing ``gpt-4.1-mini`` (the
OpenAI protocol, a pass-through for both) to the same nginx upstream, with a master key
(so it checks a key on every request, as gatewayd does) and no database (so it writes
no spend rows: the comparison favours it).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx

from upstreams import free_port

MASTER_KEY = "sk-bench-litellm"


class LiteLLM:
    def __init__(self, command: str, workdir: Path, upstream_url: str) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "litellm.yaml"
        config.write_text(
            "model_list:\n"
            "  - model_name: gpt-4.1-mini\n"
            "    litellm_params:\n"
            "      model: openai/gpt-4.1-mini\n"
            f"      api_base: {upstream_url}/v1\n"
            "      api_key: sk-upstream\n"
            "general_settings:\n"
            f"  master_key: {MASTER_KEY}\n"
            "litellm_settings:\n"
            "  telemetry: false\n"
            "  drop_params: true\n"
        )
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (workdir / "litellm.log").open("w")
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
        self.proc = subprocess.Popen(
            [command, "--config", str(config), "--host", "127.0.0.1", "--port", str(self.port), "--num_workers", "1"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=workdir,
        )
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{self.url}/health/liveliness", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"LiteLLM did not start: see {workdir / 'litellm.log'}")
            time.sleep(0.5)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {MASTER_KEY}"}

    @property
    def pids(self) -> list[int]:
        """The proxy and any process it started (uvicorn's worker)."""
        pids = [self.proc.pid]
        for pid in pids:
            try:
                pids += [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
            except FileNotFoundError:
                pass
        return pids

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
