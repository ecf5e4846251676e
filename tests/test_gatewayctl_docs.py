"""Every ``gatewayctl`` command the docs show exists, with every flag it names (issue 32: the
docs named an ``account pay --amount`` that never existed).

Each line of a code block in README.md and docs/*.md that runs ``gatewayctl`` (fenced or
indented, after ``$``, ``.venv/bin/``, ``sudo -u ...``, ``VAR=...``, a pipe or ``#``), and each inline
code span that starts with ``gatewayctl``, is checked against the real command tree:

- the words after ``gatewayctl`` (and the options before the command) name commands, each of
  ``create|update`` among them; the command's ``--help`` runs (exit 0);
- every ``--flag`` on the line is an option of that command (of one of the alternatives, where
  the line shows several: ``key create|update ... --no-budget``), or of ``gatewayctl`` itself;
- a line given with real values (no placeholder notation: ``|``, ``[``, ``...``) is parsed as
  the operator would type it, with ``--help`` put after the command: an option that does not
  exist or lacks its value fails there, before any call to a daemon;
- and those of them that name an account (``ann@example.com``) run as typed against the real
  admin API in-process (tests/gatewayctl_cli.py).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.gatewayctl_cli import COMMAND, gatewayctl
from tests.gatewayctl_cli import (  # noqa: F401  (fixtures)
    admin_fixture, shared_admin_fixture,
)

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# where gatewayctl starts a command in a code line: the line's start, a prompt, a path, sudo, a pipe, a comment
STARTS = re.compile(r"(?:^|\$ |\| |&& |# |sudo -u \S+ |[A-Z_]+=\S+ |\S*/)gatewayctl(?= |$)")
INLINE = re.compile(r"`((?:\S*/)?gatewayctl(?: [^`]*)?)`")
NOTATION = re.compile(r"[|\[\]]|\.\.\.|\b[A-Z][A-Z0-9_]*(?:_[A-Z]+)?\b")  # placeholders: ACCOUNT, [--x], a|b, ...


def doc_commands() -> list[tuple[str, str]]:
    """(where, the command line from ``gatewayctl`` on, comment removed) for every use shown."""
    found = []
    for path in DOCS:
        fenced = False
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            where = f"{path.relative_to(ROOT)}:{number}"
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            if fenced or line.startswith("    "):
                match = STARTS.search(line.strip())
                if match:
                    command = line.strip()[match.start():]
                    command = command[command.index("gatewayctl"):]
                    # an indented continuation line: options of the command above
                    for following in lines[number:]:
                        if not following.startswith("     ") or not following.strip().startswith(("[", "--")):
                            break
                        command += " " + following.strip()
                    found.append((where, re.split(r"\s+#\s", command)[0].strip()))
                    continue
            for span in INLINE.findall(line):
                found.append((where, span[span.index("gatewayctl"):]))
    return found


COMMANDS = doc_commands()


def words(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError:  # an unbalanced quote in a sketch: plain words are enough to check names
        return line.split()


def options_of(command: Any) -> set[str]:
    names = {"--help"}
    for param in command.params:
        names.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("--"))
    return names


def resolve(line: str) -> tuple[list[list[str]], list[Any]]:
    """The command paths the line names (several for ``a|b``), and their commands; fails the
    test with the line when a word that must be a command is none."""
    args = words(line)[1:]
    root_options = options_of(COMMAND)
    takes_value = {o for p in COMMAND.params if p.param_type_name == "option" and not p.is_flag for o in p.opts}
    while args and args[0].startswith("--"):  # gatewayctl --socket X --json key list ...
        option = args.pop(0)
        assert option.split("=")[0] in root_options, f"gatewayctl has no option {option}"
        if option in takes_value and args:
            args.pop(0)
    paths: list[list[str]] = [[]]
    commands: list[Any] = [COMMAND]  # typer's own click: its classes are not click's
    while args and all(hasattr(c, "commands") for c in commands):
        word = args[0]
        if word.startswith("-") or word in ("...", "|"):
            break
        names = word.split("|")
        subs = [(path + [n], c.commands.get(n)) for path, c in zip(paths, commands) for n in names]
        missing = [" ".join(p) for p, c in subs if c is None]
        assert not missing, f"no command 'gatewayctl {missing[0]}'"
        args.pop(0)
        paths, commands = [p for p, _ in subs], [c for _, c in subs if c is not None]
    return paths, commands


@pytest.mark.parametrize("where, line", COMMANDS, ids=[f"{where} {line}"[:90] for where, line in COMMANDS])
def test_every_command_and_flag_the_docs_show_exists(where: str, line: str) -> None:
    paths, commands = resolve(line)
    known = set().union(*(options_of(c) for c in commands)) | options_of(COMMAND)
    for word in words(line)[1:]:
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", word):
            assert flag in known, f"{where}: {line!r} names {flag}, which 'gatewayctl {' '.join(paths[0])}' has not"
    for path in paths:
        run = gatewayctl(None, *path, "--help")
        assert run.exit_code == 0, f"{where}: gatewayctl {' '.join(path)} --help: {run.stderr}"
    if not NOTATION.search(line.removeprefix("gatewayctl")) and paths[0]:
        # a real example: parsed as typed (help after the command, so nothing is sent anywhere)
        args = words(line)[1:]
        at = max(i for i, w in enumerate(args) if w == paths[0][-1]) + 1
        run = gatewayctl(None, *args[:at], "--help", *args[at:])
        assert run.exit_code == 0, f"{where}: {line!r} does not parse: {run.err}"


def test_the_docs_show_the_commands_this_issue_is_about() -> None:
    """The parser above finds what it must check: an empty list would pass every test."""
    shown = {line for _, line in COMMANDS}
    assert len(COMMANDS) > 80
    assert any(line.startswith("gatewayctl account adjust ") for line in shown)
    assert any(line.startswith("gatewayctl usage ACCOUNT [--key NAME|ID]") for line in shown)
    assert "gatewayctl account pay you@example.com 20" in shown  # README's, after .venv/bin/


def test_a_flag_that_does_not_exist_is_caught() -> None:
    """What the check would have said of funding.md's old text."""
    with pytest.raises(AssertionError, match="names --amount"):
        test_every_command_and_flag_the_docs_show_exists("funding.md", "gatewayctl account pay ACCOUNT --amount USD")
    with pytest.raises(AssertionError, match="no command 'gatewayctl account refund'"):
        test_every_command_and_flag_the_docs_show_exists("x", "gatewayctl account refund ACCOUNT")


def test_the_docs_examples_with_real_values_run_against_the_admin_api(admin) -> None:
    """The examples that name an account (``ann@example.com``, README's ``you@example.com``) run
    as typed against the real admin API, in the docs' order: README's first steps make
    you@example.com, the rest use ann@example.com, made here. Left out: examples that reach
    another host or socket (``--url``, ``--socket``) and the ``--mcp`` one (this admin has no
    ``[[mcp_servers]]``); their names and flags are checked above."""
    if not any(a["email"] == "ann@example.com" for a in admin.api("GET", "/accounts")["data"]):
        admin.api("POST", "/accounts", {"email": "ann@example.com"})
    ran = []
    for where, line in COMMANDS:
        args = words(line)[1:]
        if NOTATION.search(line.removeprefix("gatewayctl")) or not any(w.endswith("@example.com") for w in args):
            continue
        if {"--url", "--socket", "--mcp"} & set(args):
            continue
        run = gatewayctl(admin, *args)
        assert run.exit_code == 0, f"{where}: {line!r}: {run.err}"
        ran.append(args[:2])
    assert ["account", "adjust"] in ran and ["account", "pay"] in ran and ["key", "create"] in ran, ran
    balance = admin.api("GET", "/accounts/ann@example.com/balance")["balance_nano"]
    assert balance == 10_500_000_000 - 2_500_000_000  # funding.md's payment, then its adjustment
