"""What the config file needs to know about each upstream protocol, without its adapter.

The config loader checks a ``[[providers]]`` table (its protocol, the keys only that protocol
takes) and a model's routes (can this protocol serve embeddings? which ``family`` by
default?) before anything runs. Those facts live here, as data, so that reading the config
(and so opening the store, the admin API, ``gatewayctl``) does not import the adapters in
``gatewayd.providers`` and with them every translator in ``gatewayd.formats`` and httpx.

A protocol whose settings need more than a check (Bedrock's and Vertex AI's credentials,
resolved with botocore and google-auth when the config is read) names the module that does it
(``settings_module``, in ``gatewayd.cloud``): it is imported only when a provider of that
protocol is configured, and imports no adapter and no translator. What ``--demo`` does to such
a provider (sign with the simulator's own credentials) is the simulator's (``demo_hook``,
in ``gatewayd.sim``), imported only under ``--demo``.

Adding a protocol: its adapter module and one line in ``gatewayd.providers.ADAPTERS``, and
its description here; ``tests/test_import_graph.py`` checks the two tables name the same
protocols, that ``client_formats`` is exactly what the adapter's ``ROUTES`` serve, and that
the named modules import no adapter.
"""

from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING, Any, Callable, Mapping

import attrs

if TYPE_CHECKING:
    from gatewayd.catalogue import ModelRoute, Provider


class SettingError(Exception):
    """A protocol's own ``[[providers]]`` key is missing or wrong (raised by its
    ``read_settings``; the config loader makes it one line naming the table and key)."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


def _no_settings(table: Mapping[str, Any]) -> dict[str, Any]:
    return {}


def _never(upstream_id: str) -> bool:
    return False


def _always(upstream_id: str) -> bool:
    return True


@attrs.frozen
class Protocol:
    name: str
    client_formats: frozenset[str]  # the client formats its adapter can serve (the keys of its ROUTES)
    sim_base_path: str  # where the built-in simulator serves it (``--demo``)
    default_family: str = "other"  # a model's ``family`` when its first route speaks it and the file sets none
    provider_keys: frozenset[str] = frozenset()  # ``[[providers]]`` keys only this protocol takes
    read_settings: Callable[[Mapping[str, Any]], dict[str, Any]] = _no_settings  # validates those keys
    # or: the module whose ``provider_settings(table, environ)`` validates them and resolves credentials
    # (imported only when a provider of this protocol is configured)
    settings_module: str | None = None
    # the ``base_url`` of a provider whose table sets none, made from its validated settings;
    # None: ``base_url`` is required
    default_base_url: Callable[[Mapping[str, Any]], str] | None = None
    # whether a route's upstream id is a Claude model (Anthropic's cache-write rates by default)
    serves_claude: Callable[[str], bool] = _never
    # the client formats one route serves when they depend on its model (a subset of client_formats)
    route_formats: Callable[[str], frozenset[str]] | None = None
    # ``module:function`` in gatewayd.sim that points a provider at the simulator (``--demo``),
    # when its base URL and a dummy key are not enough
    demo_hook: str | None = None
    # a non-streamed answer whose client left: the provider finishes it and bills it all (True),
    # or stops and bills what it made (False); docs/billing.md has the table and its evidence
    finishes_abandoned_answers: bool = True

    def settings(self, table: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
        """Its own keys of a ``[[providers]]`` table, validated (:class:`SettingError`);
        ``environ``: the config loader's, for keys that name an environment variable."""
        if self.settings_module is not None:
            module = importlib.import_module(self.settings_module)
            return module.provider_settings(table, environ)  # type: ignore[no-any-return]
        return self.read_settings(table)


def _azure_settings(table: Mapping[str, Any]) -> dict[str, Any]:
    """``api_version``: every Azure request names the API version it speaks, and there is no
    default worth guessing (each version has its own features and retirement date)."""
    version = table.get("api_version")
    if version is None:
        raise SettingError("api_version", 'required for protocol azure-openai (e.g. "2024-10-21")')
    if not isinstance(version, str) or not version.strip():
        raise SettingError("api_version", 'must be a non-empty string (e.g. "2024-10-21")')
    return {"api_version": version}


def bedrock_invokes(upstream_id: str) -> bool:
    """Bedrock: Anthropic models (and their inference profiles) take InvokeModel; the rest
    Converse (an application inference profile's ARN names no model: it goes through Converse,
    which serves Claude too, translated). Claude on Bedrock bills cache writes by Anthropic's
    rule (1.25x, 1h 2x)."""
    return "anthropic." in upstream_id


def vertex_publisher_model(upstream_id: str) -> tuple[str, str]:
    """Vertex AI: (publisher, model id) of a route: ``anthropic/<id>`` / ``google/<id>`` say it;
    else a ``claude`` id is Anthropic's and any other Google's."""
    publisher, slash, model = upstream_id.partition("/")
    if slash and publisher in ("anthropic", "google"):
        return publisher, model
    return ("anthropic" if upstream_id.startswith("claude") else "google"), upstream_id


def _vertex_claude(upstream_id: str) -> bool:
    return vertex_publisher_model(upstream_id)[0] == "anthropic"


def _vertex_formats(upstream_id: str) -> frozenset[str]:
    """Claude on Vertex serves messages, chat, responses and Gemini-API clients; Gemini all but
    messages."""
    return frozenset({"messages", "chat", "responses", "gemini"}) if _vertex_claude(upstream_id) else frozenset(
        {"chat", "responses", "gemini"})


def _bedrock_formats(upstream_id: str) -> frozenset[str]:
    """Claude on Bedrock (InvokeModel) serves messages, chat, responses and Gemini-API clients;
    a Converse model (Llama, Mistral, Nova ...) all but messages: the spec's dual-format models
    are those whose upstream speaks Anthropic Messages, and Converse does not."""
    return frozenset({"messages", "chat", "responses", "gemini"}) if bedrock_invokes(upstream_id) else frozenset(
        {"chat", "responses", "gemini"})


def _bedrock_url(settings: Mapping[str, Any]) -> str:
    """Bedrock's regional runtime endpoint."""
    return f"https://bedrock-runtime.{settings['region']}.amazonaws.com"


def _vertex_url(settings: Mapping[str, Any]) -> str:
    """Vertex's regional endpoint, or the global one."""
    region = settings["region"]
    return "https://aiplatform.googleapis.com" if region == "global" else f"https://{region}-aiplatform.googleapis.com"


PROTOCOLS: dict[str, Protocol] = {p.name: p for p in (
    Protocol("openai", frozenset({"chat", "responses", "embeddings", "gemini"}), "/v1", default_family="gpt"),
    Protocol("anthropic", frozenset({"messages", "chat", "responses", "gemini"}), "", default_family="claude",
             serves_claude=_always),
    Protocol("azure-openai", frozenset({"chat", "responses", "embeddings", "gemini"}), "/openai", default_family="gpt",
             provider_keys=frozenset({"api_version"}), read_settings=_azure_settings),
    Protocol("gemini", frozenset({"chat", "responses", "gemini"}), "/v1beta"),
    Protocol("bedrock", frozenset({"messages", "chat", "responses", "gemini"}), "/bedrock",
             provider_keys=frozenset({"region", "aws_access_key_id_env", "aws_secret_access_key_env",
                                      "aws_session_token_env"}),
             settings_module="gatewayd.cloud.bedrock_auth", default_base_url=_bedrock_url,
             serves_claude=bedrock_invokes, route_formats=_bedrock_formats,
             demo_hook="gatewayd.sim.bedrock:demo_provider"),
    Protocol("vertex", frozenset({"messages", "chat", "responses", "gemini"}), "/vertex",
             provider_keys=frozenset({"project", "region", "credentials_file"}),
             settings_module="gatewayd.cloud.vertex_auth", default_base_url=_vertex_url,
             serves_claude=_vertex_claude, route_formats=_vertex_formats,
             demo_hook="gatewayd.sim.vertex:demo_provider"),
)}


@functools.lru_cache(maxsize=4096)
def client_formats(protocol: str, upstream_id: str | None = None) -> frozenset[str]:
    """The client formats a provider of ``protocol`` can serve; with ``upstream_id``, those
    that route serves (Gemini on Vertex AI serves no messages)."""
    described = PROTOCOLS[protocol]
    if described.route_formats is None or upstream_id is None:
        return described.client_formats
    return described.client_formats & described.route_formats(upstream_id)


def serves(route: ModelRoute, client_format: str) -> bool:
    """Whether ``route`` can take a client of ``client_format`` (the router plans only these);
    ``"compact"`` (``POST /v1/responses/compact``) wherever responses are served."""
    if client_format == "compact":
        client_format = "responses"
    return client_format in client_formats(route.provider.protocol, route.upstream_id)


def anthropic_rates(protocol: str, upstream_id: str) -> bool:
    """Whether a model whose first route is this one defaults to Anthropic's cache-write rates
    (1.25x input for 5 minutes, 2x for 1 hour): Claude, wherever it is bought."""
    return PROTOCOLS[protocol].serves_claude(upstream_id)


def simulated(provider: Provider, sim_url: str) -> Provider:
    """``provider`` pointed at the built-in simulator (``--demo``): its base URL under the
    simulator and a key the simulator takes, or what the simulator's ``demo_hook`` says
    (Bedrock: the simulator's SigV4 keys; Vertex AI: its own service account)."""
    described = PROTOCOLS[provider.protocol]
    if described.demo_hook is not None:
        module, _, function = described.demo_hook.partition(":")
        return getattr(importlib.import_module(module), function)(provider, sim_url)  # type: ignore[no-any-return]
    return attrs.evolve(provider, base_url=sim_url + described.sim_base_path, api_key="sim-key", missing_key_env=None)


def finishes_abandoned_answers(protocol: str) -> bool:
    """Whether a provider of ``protocol`` finishes (and bills) a non-streamed answer whose client
    left: then the gateway reads it on in a task the daemon owns and charges the provider's usage
    (``gatewayd.failover``); else it closes the request and charges it as a cut stream."""
    return PROTOCOLS[protocol].finishes_abandoned_answers
