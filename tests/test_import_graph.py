"""The import graph of gatewayd/ and gatewayctl/ flows one way.

Every ``import`` in the two packages is read with ``ast`` (imports inside functions too: a
lazy import is still a dependency, only a hidden one); imports under ``if TYPE_CHECKING:``
are left out (they never run). An import of a package's own ancestor (``from gatewayd.store
import sqlite`` inside ``gatewayd/store/``) is not counted: Python runs a package's
``__init__`` before any of its modules anyway.

The layers, lowest first; a module may import its own layer and the ones below, never above:

1. **values** (sans-I/O, no trio): ``formats/`` (wire types and translation: imports nothing
   of gatewayd outside ``formats/``), ``money`` (imports nothing of gatewayd), ``catalogue``,
   ``records``, ``errors``, ``protocols``, ``trace`` ...
2. **rules and state**: ``config`` (reads the file; knows protocols from ``protocols``, never
   the adapters), ``billing/``, ``store/``, ``cloud/`` (Bedrock's and Vertex AI's credentials
   and provider settings: botocore, google-auth, httpx). ``protocols`` names a ``cloud/`` module
   per protocol that needs one (``settings_module``) and a simulator hook for ``--demo``
   (``demo_hook``) as strings, imported only when such a provider is configured (or under
   ``--demo``): not an edge of this graph, so they are checked here by name. A ``cloud/``
   module reaches no adapter, no translator and no request path. The store may use ``billing`` (the audit recomputes
   hold ceilings with ``billing.estimate``, which reads ``formats.usage``'s ``Usage``: a value
   type; and ``errors`` reads provider error bodies with ``formats.errors``, the one parser of
   provider bytes: these two leaves are all of ``formats/`` the store reaches, no translator); it never
   reaches an adapter, the relay or the listeners, so opening it is cheap.
3. **adapters**: ``providers/`` (one per upstream protocol, httpx): never the request path above.
4. **the request path**: ``routing``, ``access``, ``relay``, ``pump``, ``endpoints``, ...
5. **the daemon's edge**: ``app``, ``api_routes``, ``responses_ws``, ``server``, ``workers``, ``cli``,
   ``admin/``, ``console/``: nothing below imports them.

``gatewayd`` never imports ``gatewayctl`` (the CLI is a client of the admin API), and no
module of either package sits in an import cycle.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gatewayd", "gatewayctl")

# the daemon's edge: what only the entry points (and each other) may import
EDGE = ("gatewayd.__main__", "gatewayd.app", "gatewayd.api_routes", "gatewayd.responses_ws", "gatewayd.server",
        "gatewayd.workers", "gatewayd.cli", "gatewayd.admin", "gatewayd.console", "gatewayd.demo", "gatewayd.reload")
REQUEST_PATH = ("gatewayd.relay", "gatewayd.pump", "gatewayd.endpoints", "gatewayd.routing", "gatewayd.access",
                "gatewayd.directory", "gatewayd.ops")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = _modules()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node outside ``if TYPE_CHECKING:`` blocks."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from (n for child in node.orelse for n in _imports_of(child))
            continue
        yield from _imports_of(node)


def _imports_of(node: ast.AST):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    else:
        yield from _imports(node)


def _known(name: str) -> str | None:
    """The module of ours ``name`` is, or is inside of (``gatewayd.x.Name`` -> ``gatewayd.x``)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = f"{package}.{node.module}" if node.module else package
        else:
            base = node.module or ""
        # ``from pkg import sub`` depends on the module ``pkg.sub``; ``from mod import Name`` on ``mod``
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
    found = {_known(name) for name in names} - {None, module}
    return {target for target in found if not module.startswith(target + ".")}  # an ancestor package


@functools.cache  # read when a test first asks, not at collection: each xdist worker collects this file
def import_graph() -> dict[str, set[str]]:
    graph = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        graph[module] = set().union(*(_targets(module, node) for node in _imports(tree)))
    return graph



def _in(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _reach(start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for target in import_graph()[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def _cycles() -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(import_graph()[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(import_graph()):
        if v not in index:
            visit(v)
    return found


def _violations(importers, forbidden) -> list[str]:
    return sorted(f"{m} imports {t}" for m in import_graph() if _in(m, importers) for t in import_graph()[m] if _in(t, forbidden))


def test_the_graph_was_read():
    assert len(MODULES) > 100 and "gatewayd.formats.usage" in import_graph()["gatewayd.billing.pricing"]
    assert "gatewayd.store.sqlite" in import_graph()["gatewayd.store"]  # a lazy import inside a function counts


def test_no_module_is_in_an_import_cycle():
    assert _cycles() == []


def test_formats_import_nothing_of_gatewayd_outside_formats():
    assert [f"{m} imports {t}" for m in import_graph() if _in(m, ["gatewayd.formats"])
            for t in import_graph()[m] if not _in(t, ["gatewayd.formats"])] == []


def test_money_imports_nothing_of_gatewayd():
    assert import_graph()["gatewayd.money"] == set()


@pytest.mark.parametrize("start", ["gatewayd.store", "gatewayd.store.sqlite", "gatewayd.store.postgres",
                                   "gatewayd.config", "gatewayd.billing.ledger"])
def test_the_store_config_and_billing_reach_no_adapter_and_no_request_path(start):
    reached = _reach(start)
    assert sorted(m for m in reached if _in(m, ["gatewayd.providers", *REQUEST_PATH, *EDGE, "gatewayd.sim"])) == []
    # value modules only, no translator: Usage, the one parser of provider bytes with its
    # InvalidAnswer (gatewayd.errors reads a provider's error body with it), and the thinking
    # budget's arithmetic (the bounds a lowered cap imposes on it, billing.features)
    assert set(m for m in reached if _in(m, ["gatewayd.formats"])) <= {"gatewayd.formats.usage",
                                                                       "gatewayd.formats.errors",
                                                                       "gatewayd.formats.thinking"}


def test_adapters_never_import_the_request_path_or_the_edge():
    assert _violations(["gatewayd.providers"], [*REQUEST_PATH, *EDGE]) == []


def test_nothing_below_the_edge_imports_it():
    below = [m for m in import_graph() if m.startswith("gatewayd.") and not _in(m, EDGE) and not _in(m, ["gatewayd.sim"])]
    assert _violations(below, EDGE) == []


def test_gatewayd_never_imports_gatewayctl():
    assert _violations(["gatewayd"], ["gatewayctl"]) == []


def test_every_adapter_has_its_protocol_described_for_the_config():
    from gatewayd.protocols import PROTOCOLS
    from gatewayd.providers import ADAPTERS

    assert set(PROTOCOLS) == set(ADAPTERS) == {"openai", "anthropic", "azure-openai", "gemini", "bedrock", "vertex"}
    assert {name: set(p.client_formats) for name, p in PROTOCOLS.items()} == {
        name: set(adapter.ROUTES) for name, adapter in ADAPTERS.items()}


def _named_modules() -> dict[str, str]:
    from gatewayd.protocols import PROTOCOLS

    named = {}
    for p in PROTOCOLS.values():
        if p.settings_module is not None:
            named[p.settings_module] = "settings_module"
        if p.demo_hook is not None:
            named[p.demo_hook.partition(":")[0]] = "demo_hook"
    return named


def test_the_modules_protocols_name_exist_and_have_their_hooks():
    import importlib

    from gatewayd.protocols import PROTOCOLS

    assert set(_named_modules()) == {"gatewayd.cloud.bedrock_auth", "gatewayd.cloud.vertex_auth",
                                     "gatewayd.sim.bedrock", "gatewayd.sim.vertex"}
    for p in PROTOCOLS.values():
        if p.settings_module is not None:
            assert callable(importlib.import_module(p.settings_module).provider_settings)
        if p.demo_hook is not None:
            module, _, function = p.demo_hook.partition(":")
            assert callable(getattr(importlib.import_module(module), function))


@pytest.mark.parametrize("settings_module", ["gatewayd.cloud.bedrock_auth", "gatewayd.cloud.vertex_auth"])
def test_a_protocols_settings_module_reaches_no_adapter_translator_or_request_path(settings_module):
    assert _named_modules()[settings_module] == "settings_module"
    reached = _reach(settings_module) | {settings_module}
    assert sorted(m for m in reached if _in(m, ["gatewayd.providers", "gatewayd.formats", *REQUEST_PATH, *EDGE,
                                               "gatewayd.sim"])) == []


def test_the_demo_hooks_are_the_simulators():
    assert all(m.startswith("gatewayd.sim.") for m, kind in _named_modules().items() if kind == "demo_hook")


def test_no_adapter_or_request_path_loads_a_cloud_credentials_module():
    """Bedrock's and Vertex AI's credentials (botocore, google-auth: some 14 MiB of a daemon's
    memory) load when such a provider is configured, through ``protocols.settings_module``;
    the adapters name their types under ``TYPE_CHECKING`` only."""
    loaders = [m for m in import_graph() if _in(m, ["gatewayd.providers", *REQUEST_PATH, *EDGE])]
    assert sorted(f"{m} imports {t}" for m in loaders for t in import_graph()[m] if _in(t, ["gatewayd.cloud"])) == []
