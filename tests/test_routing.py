"""Route choice, weights, stickiness and health: the Router on plain values (no I/O)."""

from __future__ import annotations

import collections
import random

import pytest

from gatewayd.config import Model, ModelRoute, Provider, RoutingSettings, load_config, ConfigError
from gatewayd.errors import retry_after_seconds
from gatewayd.routing import Router, sticky_key


def provider(name: str, protocol: str = "openai") -> Provider:
    return Provider(name=name, protocol=protocol, base_url=f"http://{name}.test/v1", api_key="k")


def model(*routes: ModelRoute, model_id: str = "m") -> Model:
    return Model(id=model_id, routes=tuple(sorted(routes, key=lambda r: -r.priority)), kind="chat", family="gpt",
                 input_price=1, output_price=1, cached_input_price=None, cache_write_price=None,
                 max_output_tokens=100, rate_limit=None, client_formats=frozenset({"chat", "responses"}))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def router(**settings) -> tuple[Router, Clock]:
    clock = Clock()
    return Router(RoutingSettings(**settings), clock=clock, rng=random.Random(7)), clock


A, B, C = (ModelRoute(provider(n), "up") for n in ("a", "b", "c"))


def names(routes) -> list[str]:
    return [r.provider.name for r in routes]


def test_higher_priority_first_then_lower():
    r, _ = router()
    m = model(ModelRoute(provider("a"), "up", priority=0), ModelRoute(provider("b"), "up", priority=5),
              ModelRoute(provider("c"), "up", priority=1))
    assert names(r.plan(m, "chat")) == ["b", "c", "a"]


def test_equal_priorities_are_spread_by_weight():
    r, _ = router()
    m = model(ModelRoute(provider("a"), "up", weight=3), ModelRoute(provider("b"), "up", weight=1))
    firsts = collections.Counter(r.plan(m, "chat")[0].provider.name for _ in range(4000))
    assert 0.70 < firsts["a"] / 4000 < 0.80, firsts  # 3:1 -> 75 %
    assert all(len(r.plan(m, "chat")) == 2 for _ in range(10))  # the other is still a fallback


def test_only_routes_serving_the_client_format_are_planned():
    r, _ = router()
    m = model(ModelRoute(provider("a", "openai"), "up"), ModelRoute(provider("b", "anthropic"), "up"))
    assert names(r.plan(m, "messages")) == ["b"]
    assert names(r.plan(m, "embeddings")) == ["a"]
    assert sorted(names(r.plan(m, "chat"))) == ["a", "b"]


def test_failures_cool_a_route_down_then_one_probe_reopens_it():
    r, clock = router(failures_to_cool=2, cooldown_s=10)
    m = model(ModelRoute(provider("a"), "up", priority=1), B)
    r.failed(m.routes[0], "503")
    assert names(r.plan(m, "chat")) == ["a", "b"]  # one failure: still first
    r.failed(m.routes[0], "503")
    assert names(r.plan(m, "chat")) == ["b", "a"]  # cooling: last resort only
    assert r.report({"m": m})[0]["state"] == "cooling"
    clock.now += 10
    assert names(r.plan(m, "chat")) == ["a", "b"]  # cool-down over: ready to probe
    r.started(m.routes[0])
    assert r.health["a/up"].probing
    assert names(r.plan(m, "chat")) == ["b", "a"]  # one probe at a time
    r.failed(m.routes[0], "503 again")
    assert r.health["a/up"].cooled_until == clock.now + 20  # a failed probe doubles the cool-down
    clock.now += 20
    r.started(m.routes[0])
    r.succeeded(m.routes[0], 0.05)
    h = r.health["a/up"]
    assert (h.cooled_until, h.consecutive_failures, h.cooldowns, h.probing) == (0, 0, 0, False)
    assert names(r.plan(m, "chat")) == ["a", "b"]


def test_retry_after_cools_the_route_for_that_long_at_once():
    r, clock = router(failures_to_cool=5)
    m = model(ModelRoute(provider("a"), "up", priority=1), B)
    r.failed(m.routes[0], "429", retry_after_s=7)
    assert names(r.plan(m, "chat")) == ["b", "a"]
    clock.now += 6.9
    assert names(r.plan(m, "chat"))[0] == "b"
    clock.now += 0.2
    assert names(r.plan(m, "chat"))[0] == "a"


def test_retry_after_is_capped():
    r, clock = router(max_cooldown_s=60)
    r.failed(A, "429", retry_after_s=86400)
    assert r.health["a/up"].cooled_until == clock.now + 60


def test_when_every_route_cools_the_soonest_ready_leads():
    r, _ = router(failures_to_cool=1)
    m = model(A, B)
    r.failed(A, "x", retry_after_s=50)
    r.failed(B, "x", retry_after_s=40)
    assert names(r.plan(m, "chat")) == ["b", "a"]


def test_a_conversation_sticks_to_the_route_that_served_it_while_available():
    r, clock = router(failures_to_cool=1)
    m = model(A, B, C)
    key = "user:alice"
    first = r.plan(m, "chat", key)[0]
    r.remember(m, key, first)
    assert all(r.plan(m, "chat", key)[0] == first for _ in range(50))
    r.failed(first, "503")  # cooled: the conversation moves, and sticks to its new route
    moved = r.plan(m, "chat", key)[0]
    assert moved != first
    r.remember(m, key, moved)
    clock.now += 1000  # the old route is healthy again; the conversation stays where it is now
    assert all(r.plan(m, "chat", key)[0] == moved for _ in range(20))


def test_stickiness_expires_and_is_bounded():
    r, clock = router(sticky_ttl_s=60, sticky_max=2)
    m = model(ModelRoute(provider("a"), "up", weight=1), ModelRoute(provider("b"), "up", weight=1000))
    r.remember(m, "k1", m.routes[0])
    assert r.plan(m, "chat", "k1")[0].provider.name == "a"
    clock.now += 61
    assert sum(r.plan(m, "chat", "k1")[0].provider.name == "a" for _ in range(50)) < 5  # weight rules again
    r.remember(m, "k1", m.routes[0])
    r.remember(m, "k2", m.routes[0])
    r.remember(m, "k3", m.routes[0])
    assert len(r._sticky) == 2 and ("m", "k1") not in r._sticky


def test_single_route_model_remembers_nothing():
    r, _ = router()
    m = model(A)
    r.remember(m, "user:x", A)
    assert not r._sticky and names(r.plan(m, "chat", "user:x")) == ["a"]


@pytest.mark.parametrize("fmt,body,expected", [
    ("chat", {"prompt_cache_key": "pk", "user": "u"}, "prompt_cache_key:pk"),
    ("chat", {"user": "u", "messages": [{"role": "user", "content": "x"}]}, "user:u"),
    ("messages", {"metadata": {"user_id": "abc"}, "messages": []}, "user_id:abc"),
    ("responses", {"prompt_cache_key": "pk", "input": "hi"}, "prompt_cache_key:pk"),
])
def test_sticky_key_prefers_explicit_keys(fmt, body, expected):
    assert sticky_key(fmt, body) == expected


def test_sticky_key_of_a_conversation_is_its_opening():
    turn1 = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}
    turn2 = {"messages": turn1["messages"] + [{"role": "assistant", "content": "hello"},
                                              {"role": "user", "content": "more"}]}
    other = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "bye"}]}
    assert sticky_key("chat", turn1) == sticky_key("chat", turn2) != sticky_key("chat", other)
    assert sticky_key("chat", turn1).startswith("prefix:")
    m1 = {"system": "s", "messages": [{"role": "user", "content": "q"}]}
    m2 = {"system": "s", "messages": m1["messages"] + [{"role": "assistant", "content": "a"},
                                                        {"role": "user", "content": "q2"}]}
    assert sticky_key("messages", m1) == sticky_key("messages", m2)
    assert sticky_key("responses", {"input": "hello"}) == sticky_key("responses", {"input": "hello"})
    assert sticky_key("chat", {}) is None


@pytest.mark.parametrize("value,expected", [("7", 7.0), ("0.5", 0.5), (None, None), ("soon", None), ("-3", 0.0)])
def test_retry_after_seconds(value, expected):
    assert retry_after_seconds(value) == expected


# -- the TOML contract ----------------------------------------------------------------------

PROVIDERS = """
[[providers]]
name = "anthropic"
protocol = "anthropic"
base_url = "http://127.0.0.1:1/"
[[providers]]
name = "anthropic-backup"
protocol = "anthropic"
base_url = "http://127.0.0.1:2"
[[providers]]
name = "azure"
protocol = "azure-openai"
base_url = "https://myresource.openai.azure.com/openai"
api_version = "2024-10-21"
api_key = "az"
"""


def load(tmp_path, text: str):
    path = tmp_path / "g.toml"
    path.write_text(text)
    return load_config(path, environ={})


def test_routes_table_as_in_the_issue(tmp_path):
    config = load(tmp_path, PROVIDERS + """
[[models]]
id = "claude-sonnet-4-5"
input_price = 3.0
output_price = 15.0
[[models.routes]]
provider = "anthropic"
priority = 1
weight = 3
[[models.routes]]
provider = "anthropic-backup"
upstream_id = "claude-sonnet-4-5-20250929"
[[models]]
id = "gpt-4o"
provider = "azure"
upstream_id = "my-gpt4o-deployment"
""")
    m = config.models["claude-sonnet-4-5"]
    assert [(r.name, r.priority, r.weight) for r in m.routes] == [
        ("anthropic/claude-sonnet-4-5", 1, 3), ("anthropic-backup/claude-sonnet-4-5-20250929", 0, 1)]
    assert m.dual_format and m.family == "claude"
    g = config.models["gpt-4o"]
    assert [(r.name, r.priority, r.weight) for r in g.routes] == [("azure/my-gpt4o-deployment", 0, 1)]
    assert g.client_formats == {"chat", "responses", "embeddings", "gemini"}
    assert config.providers["azure"].settings == {"api_version": "2024-10-21"}
    assert config.routing == RoutingSettings()


@pytest.mark.parametrize("model_toml,message", [
    ('id = "x"\nprovider = "anthropic"\n[[models.routes]]\nprovider = "anthropic"',
     "models[0].provider: give either provider/upstream_id or [[models.routes]], not both"),
    ('id = "x"\nupstream_id = "y"\n[[models.routes]]\nprovider = "anthropic"',
     "models[0].upstream_id: give either provider/upstream_id or [[models.routes]], not both"),
    ('id = "x"\n[[models.routes]]\nprovider = "nope"', "models[0].routes[0].provider: no provider named 'nope'"),
    ('id = "x"\n[[models.routes]]\nprovider = "anthropic"\nweight = 0', "models[0].routes[0].weight: must be at least 1"),
    ('id = "x"\n[[models.routes]]\nprovider = "anthropic"\npriority = 1.5', "models[0].routes[0].priority: must be an integer"),
    ('id = "x"\n[[models.routes]]\nprovider = "anthropic"\nfoo = 1', "models[0].routes[0].foo: unknown key"),
    ('id = "x"\n[[models.routes]]\nprovider = "anthropic"\n[[models.routes]]\nprovider = "anthropic"',
     "models[0].routes[1]: duplicate route 'anthropic/x'"),
    ('id = "x"\nroutes = []', "models[0].routes: must be a non-empty array of tables ([[models.routes]])"),
    ('id = "x"\nkind = "embedding"\nprovider = "anthropic"',
     "models[0].provider: protocol anthropic does not serve embeddings"),
])
def test_route_config_errors_are_one_line(tmp_path, model_toml, message):
    with pytest.raises(ConfigError) as e:
        load(tmp_path, PROVIDERS + "[[models]]\n" + model_toml + "\n")
    assert str(e.value) == message


@pytest.mark.parametrize("extra,message", [
    ("", 'providers[0].api_version: required for protocol azure-openai (e.g. "2024-10-21")'),
    ("api_version = 20241021\n", 'providers[0].api_version: must be a non-empty string (e.g. "2024-10-21")'),
    ('api_version = " "\n', 'providers[0].api_version: must be a non-empty string (e.g. "2024-10-21")'),
    ('api_version = "2024-10-21"\ncolour = "eu"\n', "providers[0].colour: unknown key"),
    ('api_version = "2024-10-21"\nregion = "eu"\n',
     "providers[0].region: not a setting of protocol azure-openai (only of bedrock, vertex)"),
])
def test_azure_needs_its_api_version(tmp_path, extra, message):
    """Declared and checked by the Azure adapter (providers/azure_openai.py), not by the loader."""
    with pytest.raises(ConfigError) as e:
        load(tmp_path, '[[providers]]\nname = "az"\nprotocol = "azure-openai"\nbase_url = "https://x/openai"\n'
                       + extra + '[[models]]\nid = "m"\nprovider = "az"\n')
    assert str(e.value) == message


def test_a_setting_of_another_protocol_is_refused_naming_it(tmp_path):
    with pytest.raises(ConfigError) as e:
        load(tmp_path, '[[providers]]\nname = "o"\nprotocol = "openai"\nbase_url = "https://x/v1"\n'
                       'api_version = "2024-10-21"\n[[models]]\nid = "m"\nprovider = "o"\n')
    assert str(e.value) == "providers[0].api_version: not a setting of protocol openai (only of azure-openai)"


def test_a_new_protocol_brings_its_own_provider_settings(tmp_path, monkeypatch):
    """The loader names no protocol: a protocol's description (gatewayd.protocols) declares its
    extra keys and reads them, so a new protocol needs no change in gatewayd/config.py."""
    from gatewayd.protocols import PROTOCOLS, Protocol, SettingError

    def settings(table):
        if table.get("region") not in ("eu", "us"):
            raise SettingError("region", "must be eu or us")
        return {"region": table["region"]}

    fake = Protocol("fake", frozenset({"chat"}), "/v1", provider_keys=frozenset({"region"}), read_settings=settings)
    monkeypatch.setitem(PROTOCOLS, "fake", fake)
    text = '[[providers]]\nname = "f"\nprotocol = "fake"\nbase_url = "https://f/v1"\n{}[[models]]\nid = "m"\nprovider = "f"\n'
    assert load(tmp_path, text.format('region = "us"\n')).providers["f"].settings == {"region": "us"}
    with pytest.raises(ConfigError, match=r"^providers\[0\].region: must be eu or us$"):
        load(tmp_path, text.format('region = "mars"\n'))
    with pytest.raises(ConfigError, match=r"^providers\[0\].api_version: not a setting of protocol fake"):
        load(tmp_path, text.format('region = "eu"\napi_version = "x"\n'))
    assert PROTOCOLS["azure-openai"].provider_keys == {"api_version"}
    assert all(not PROTOCOLS[p].provider_keys for p in ("openai", "anthropic", "gemini"))


def test_routing_settings(tmp_path):
    config = load(tmp_path, "[routing]\nmax_attempts = 2\nfirst_byte_timeout_s = 0.5\ncooldown_s = 5\n" + PROVIDERS
                  + '[[models]]\nid = "x"\nprovider = "anthropic"\n')
    assert (config.routing.max_attempts, config.routing.first_byte_timeout_s, config.routing.cooldown_s) == (2, 0.5, 5)
    with pytest.raises(ConfigError, match=r"routing.max_attempts: must be at least 1"):
        load(tmp_path, "[routing]\nmax_attempts = 0\n")
    with pytest.raises(ConfigError, match=r"routing.retries: unknown key"):
        load(tmp_path, "[routing]\nretries = 3\n")


def test_state_changes_are_told_once_each():
    r, clock = router(failures_to_cool=2, cooldown_s=10)
    told = []
    r.on_change = lambda route, up, reason: told.append((route.name, up, reason))
    r.started(A)
    r.succeeded(A)
    r.started(A)
    r.failed(A, "503")
    r.failed(A, "503")
    r.failed(A, "503")  # already cooling: not told again
    clock.now += 10
    r.started(A)
    r.succeeded(A)
    assert told == [("a/up", False, "503; cooling down for 10 s"), ("a/up", True, "answered again")]


def test_a_conversation_key_orders_routes_the_same_in_every_process_and_by_weight():
    m = model(ModelRoute(provider("a"), "up", weight=3), ModelRoute(provider("b"), "up", weight=1),
              ModelRoute(provider("c"), "up", weight=1, priority=-1))
    one, _ = router()
    other = Router(RoutingSettings(), rng=random.Random(99))  # another instance: its own memory and randomness
    keys = [f"user:{i}" for i in range(4000)]
    firsts = collections.Counter()
    for key in keys:
        order = one.plan(m, "chat", key)
        assert names(order) == names(other.plan(m, "chat", key)) == names(one.plan(m, "chat", key))
        assert order[-1].provider.name == "c"  # priority still rules
        firsts[order[0].provider.name] += 1
    assert 0.70 < firsts["a"] / 4000 < 0.80, firsts
    # a route that leaves moves only its own conversations
    one.failed(m.routes[1], "x", retry_after_s=60)
    moved = sum(one.plan(m, "chat", k)[0].provider.name != other.plan(m, "chat", k)[0].provider.name for k in keys)
    assert moved == firsts["b"]
