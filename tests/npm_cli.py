"""A pinned command-line tool from npm, installed once into ``.venv/npm`` for the live tests
that run real clients (Claude Code, Codex CLI).

Skips the test, with the reason, when npm is missing, the registry cannot be reached, or
the installed binary does not run on this machine; a version other than the pinned one is
replaced, so a bump in the test file is all it takes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from tests.live import ROOT

PREFIX = ROOT / ".venv" / "npm"


def _installed_version(package: str) -> str | None:
    try:
        return json.loads((PREFIX / "node_modules" / package / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


@contextlib.contextmanager
def _install_lock() -> Iterator[None]:
    """One npm install into :data:`PREFIX` at a time (``make test`` runs test files in two
    processes, and the Claude Code and Codex tests install into the same prefix)."""
    PREFIX.mkdir(parents=True, exist_ok=True)
    with open(PREFIX / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def pinned_cli(package: str, version: str, binary: str) -> Path:
    """``package@version`` installed under :data:`PREFIX`; returns the path of ``binary``."""
    with _install_lock():
        return _pinned_cli(package, version, binary)


def _pinned_cli(package: str, version: str, binary: str) -> Path:
    path = PREFIX / "node_modules" / ".bin" / binary
    if not path.exists() or _installed_version(package) != version:
        if shutil.which("npm") is None:
            pytest.skip(f"npm is not installed: cannot install {package}")
        try:
            done = subprocess.run(
                ["npm", "install", "--prefix", str(PREFIX), "--no-audit", "--no-fund", "--fetch-retries=1",
                 f"{package}@{version}"],
                capture_output=True, text=True, timeout=300,
            )
        except subprocess.TimeoutExpired:
            pytest.skip(f"npm install {package} timed out (registry unreachable?)")
        if done.returncode != 0 or not path.exists() or _installed_version(package) != version:
            pytest.skip(f"npm install {package} failed (registry unreachable?): "
                        f"{(done.stderr or done.stdout).strip()[-500:]}")
    probe = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60,
                           env={"PATH": os.environ["PATH"], "HOME": str(PREFIX)})
    if probe.returncode != 0:
        pytest.skip(f"the installed {binary} CLI does not run here: {(probe.stderr or probe.stdout).strip()[-500:]}")
    return path
