"""Config validation: every mistake is one line naming the key, and exit status 2 from the CLI."""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from gatewayd.config import ConfigError, load_config

BIN = Path(sys.executable).parent


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gatewayd.toml"
    path.write_text(text)
    return path


def test_defaults_without_a_file():
    config = load_config(None, environ={})
    assert config.server.listen == ("127.0.0.1:8080",)
    assert config.server.max_body_bytes == 134_217_728
    assert config.server.stream_idle_timeout_s == 300
    assert config.server.models_visible_after_paid_nano == 3_000_000_000
    assert config.database_url == "sqlite:///var/gateway.db"
    chat = [m for m in config.models.values() if m.kind == "chat"]
    assert len(chat) == 13  # the spec's 11 and two Gemini models (issue 12)
    assert len([m for m in chat if m.dual_format]) == 4  # the spec's 4
    assert [m.id for m in chat if not m.priced] == ["o3-pro"]
    priced = [m for m in chat if m.priced]
    # the spec's ranges: input 0.24 to 5.50, output 0.96 to 33 (USD per 1M tokens: nano a token x 1,000)
    assert min(m.input_price for m in priced) == 240 and max(m.input_price for m in priced) == 5_500
    assert min(m.output_price for m in priced) == 960 and max(m.output_price for m in priced) == 33_000
    assert (config.models["claude-opus-4-8"].output_price, config.models["gpt-4.1-nano"].input_price) == (33_000, 240)
    assert config.models["o4-mini"].cached_input_price == 275  # $0.275/M, exact


def test_environment_overrides(tmp_path):
    config = load_config(None, environ={
        "GATEWAY_DATABASE_URL": f"sqlite:///{tmp_path}/x.db",
        "GATEWAY_ADMIN_SOCKET": str(tmp_path / "a.sock"),
        "GATEWAY_REDIS_URL": "redis://127.0.0.1:6379/0",
    })
    assert config.database_url == f"sqlite:///{tmp_path}/x.db"
    assert config.server.admin_socket == str(tmp_path / "a.sock")
    assert config.redis_url == "redis://127.0.0.1:6379/0"
    assert config.redis_prefix == "gatewayd:"


def test_own_catalogue_and_groups(tmp_path):
    path = write(tmp_path, """
[server]
listen = ["127.0.0.1:9000", "[::1]:9000"]
trusted_proxies = ["10.0.0.0/8"]
models_visible_after_paid = 0

[[providers]]
name = "local"
protocol = "openai"
base_url = "http://127.0.0.1:1234/v1/"
api_key = "k"

[[models]]
id = "m1"
provider = "local"
input_price = 1.5
output_price = 2
rate_limit = { requests = 5, minutes = 2 }

[[groups]]
name = "vip"
price_ratio = 0.75
""")
    config = load_config(path, environ={})
    assert list(config.models) == ["m1"]
    m1 = config.models["m1"]
    assert (m1.input_price, m1.output_price, m1.rate_limit.requests, m1.rate_limit.minutes) == (1500, 2000, 5, 2)
    assert m1.provider.base_url == "http://127.0.0.1:1234/v1"
    assert config.groups["vip"].price_ratio == Fraction(3, 4)
    assert "default" in config.groups
    assert config.server.models_visible_after_paid_nano == 0


@pytest.mark.parametrize("text,message", [
    ("[server]\nlisten = 8080\n", "server.listen: must be HOST:PORT"),
    ("[server]\nstream_idle_timeout_s = 'long'\n", "server.stream_idle_timeout_s: must be a number"),
    ("[server]\nmax_body_bytes = -1\n", "server.max_body_bytes: must be at least 1"),
    ("[server]\ntrusted_proxies = ['not-an-ip']\n", "server.trusted_proxies: not an IP network"),
    ("[server]\ncolour = 'blue'\n", "server.colour: unknown key"),
    ("[server]\ntls_cert = 'a.pem'\n", "give both or neither"),
    ("colour = 1\n", "colour: unknown top-level key"),
    ("[database]\nurl = 'mysql://x'\n", "database.url: must start with"),
    ("[[providers]]\nname='p'\nprotocol='grpc'\nbase_url='http://x'\n[[models]]\nid='m'\nprovider='p'\n",
     "providers[0].protocol: must be one of openai, anthropic"),
    ("[[providers]]\nname='p'\nprotocol='openai'\nbase_url='http://x'\n[[models]]\nid='m'\nprovider='q'\n",
     "models[0].provider: no provider named 'q'"),
    ("[[providers]]\nname='p'\nprotocol='openai'\nbase_url='http://x'\n"
     "[[models]]\nid='m'\nprovider='p'\ninput_price=0.0001\n",
     "models[0].input_price: price 0.0001 has more than three decimals"),
    ("[[providers]]\nname='p'\nprotocol='openai'\nbase_url='http://x'\n"
     "[[models]]\nid='m'\nprovider='p'\n[[models]]\nid='m'\nprovider='p'\n", "models[1].id: duplicate model"),
    ("[server\n", "not valid TOML"),
    ("[redis]\nurl = 'http://127.0.0.1:6379'\n", "redis.url: must start with redis://, rediss:// or unix://"),
    ("[redis]\nurl = 'redis://x'\nprefix = 'p'\n", "redis.prefix: unknown key"),
])
def test_bad_config_names_the_key(tmp_path, text, message):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), environ={})
    assert message in str(info.value)


@pytest.mark.live
def test_cli_prints_one_line_and_exits_2(tmp_path):
    path = write(tmp_path, "[server]\nlisten = 8080\n")
    result = subprocess.run([str(BIN / "gatewayd"), "serve", "--config", str(path)], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "gatewayd: config error: server.listen: must be HOST:PORT or a list of them"]


@pytest.mark.live
def test_cli_missing_file(tmp_path):
    result = subprocess.run([str(BIN / "gatewayd"), "serve", "--config", str(tmp_path / "nope.toml")],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "file not found" in result.stderr and "Traceback" not in result.stderr


PROVIDER = "[[providers]]\nname='p'\nprotocol='openai'\nbase_url='http://x'\n[[models]]\nid='m'\nprovider='p'\n"


@pytest.mark.parametrize("text,message", [
    ("[server]\nstream_idle_timeout_s = nan\n", "server.stream_idle_timeout_s: must be a finite number (got nan)"),
    ("[server]\nupstream_connect_timeout_s = nan\n", "server.upstream_connect_timeout_s: must be a finite number"),
    ("[server]\nshutdown_grace_s = nan\n", "server.shutdown_grace_s: must be a finite number"),
    ("[server]\ndrain_delay_s = inf\n", "server.drain_delay_s: must be a finite number (got inf)"),
    ("[server]\nmodels_visible_after_paid = nan\n", "server.models_visible_after_paid: must be a finite number"),
    ("[server]\nstream_idle_timeout_s = 1e400\n", "server.stream_idle_timeout_s: must be a finite number (got inf)"),
    ("[server]\nmax_body_bytes = 9223372036854775807\n", "server.max_body_bytes: must be at most"),
    ("[routing]\ndeadline_s = nan\n", "routing.deadline_s: must be a finite number"),
    ("[routing]\nfirst_byte_timeout_s = inf\n", "routing.first_byte_timeout_s: must be a finite number"),
    ("[routing]\nnon_stream_timeout_s = -nan\n", "routing.non_stream_timeout_s: must be a finite number"),
    ("[routing]\ncooldown_s = nan\n", "routing.cooldown_s: must be a finite number"),
    ("[routing]\nmax_cooldown_s = inf\n", "routing.max_cooldown_s: must be a finite number"),
    ("[routing]\nsticky_ttl_s = nan\n", "routing.sticky_ttl_s: must be a finite number"),
    ("[[groups]]\nname = 'vip'\nprice_ratio = inf\n", "groups[0].price_ratio: must be a finite number"),
    ("[[groups]]\nname = 'vip'\nprice_ratio = nan\n", "groups[0].price_ratio: must be a finite number"),
    ("[[groups]]\nname = 'vip'\nprice_ratio = 1e400\n", "groups[0].price_ratio: must be a finite number"),
    ("[[groups]]\nname = 'vip'\nprice_ratio = 1e300\n", "groups[0].price_ratio: must be at most"),
    ("[[groups]]\nname = 'vip'\nprice_ratio = 5000\n", "groups[0].price_ratio: ratio must be at most 1000"),
    ("[[groups]]\nname = 'vip'\n[[groups]]\nname = 'vip'\nprice_ratio = 2\n",
     "groups[1].name: duplicate group 'vip'"),
    (PROVIDER + "input_price = inf\n", "models[0].input_price: must be a finite number"),
    (PROVIDER + "output_price = nan\n", "models[0].output_price: must be a finite number"),
    (PROVIDER + "output_price = 2000000\n", "models[0].output_price: price 2000000 is above 1000000 USD per 1M"),
])
def test_non_finite_overflowing_and_duplicate_values_are_refused_naming_the_key(tmp_path, text, message):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), environ={})
    assert message in str(info.value)


def bad_files(tmp_path: Path) -> list[tuple[Path, str]]:
    not_utf8 = tmp_path / "latin1.toml"
    not_utf8.write_bytes(b'[server]\nlisten = "127.0.0.1:0"\n# caf\xe9\n')
    directory = tmp_path / "dir.toml"
    directory.mkdir()
    deep = tmp_path / "deep.toml"
    deep.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    return [
        (not_utf8, f"{not_utf8}: not UTF-8 text (byte 0xe9 at offset"),
        (directory, f"{directory}: is a directory, not a file"),
        (Path("/proc/self/mem"), "/proc/self/mem: cannot be read: Input/output error"),  # readable by nobody
        (deep, f"{deep}: not valid TOML"),
    ]


def test_every_way_a_file_can_be_bad_is_one_config_error(tmp_path, monkeypatch):
    for path, message in bad_files(tmp_path):
        with pytest.raises(ConfigError) as info:
            load_config(path, environ={})
        assert str(info.value).startswith(message), (str(info.value), message)
    unreadable = write(tmp_path, "[server]\n")

    def denied(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "open", denied)
    with pytest.raises(ConfigError, match=f"^{unreadable}: cannot be read: Permission denied$"):
        load_config(unreadable, environ={})


@pytest.mark.live
def test_check_config_answers_every_bad_file_with_one_line_and_exit_2(tmp_path):
    cases = bad_files(tmp_path)
    cases.append((write(tmp_path, "[server]\nshutdown_grace_s = nan\n"),
                  "server.shutdown_grace_s: must be a finite number (got nan)"))
    for path, message in cases:
        checked = subprocess.run([str(BIN / "gatewayd"), "check-config", str(path)], capture_output=True, text=True,
                                 timeout=30)
        assert (checked.returncode, checked.stdout) == (2, ""), checked.stderr
        [line] = checked.stderr.strip().splitlines()
        assert line.startswith("gatewayd: config error: ") and message in line, line


def test_the_environment_is_the_one_given(tmp_path, monkeypatch):
    """``load_config(environ=...)`` reads every variable from that mapping, ``api_key_env`` too,
    never from the process's environment."""
    monkeypatch.setenv("UPSTREAM_KEY", "from-the-process")
    monkeypatch.setenv("GATEWAY_DATABASE_URL", "postgresql://from-the-process/db")
    path = tmp_path / "gateway.toml"
    path.write_text('[server]\ndata_dir = "%s"\n[[providers]]\nname = "o"\nprotocol = "openai"\n'
                    'base_url = "https://o.test/v1"\napi_key_env = "UPSTREAM_KEY"\n'
                    '[[models]]\nid = "m"\nprovider = "o"\n' % tmp_path)
    given = load_config(path, environ={"UPSTREAM_KEY": "from-the-argument"})
    assert given.providers["o"].api_key == "from-the-argument"
    assert given.database_url.startswith("sqlite:///")
    with pytest.raises(ConfigError, match="providers\\[0\\].api_key_env: the environment variable UPSTREAM_KEY is not set"):
        load_config(path, environ={})  # the operator's own provider without its key: refused (issue 32)
    assert load_config(path).providers["o"].api_key == "from-the-process"  # no mapping: the process's


def test_auto_cache_is_on_for_claude_routes_and_set_per_model_or_route(tmp_path):
    """Issue 36: ``auto_cache`` (the gateway's prompt-cache breakpoints in translated requests)
    defaults to on where a route serves Claude, off elsewhere; a model's value is its routes'
    default, a route's own value wins."""
    defaults = load_config(None, environ={}).models
    assert defaults["claude-sonnet-4-5"].routes[0].auto_cache is True
    assert defaults["gpt-4.1"].routes[0].auto_cache is False
    path = write(tmp_path, """
[[providers]]
name = "a"
protocol = "anthropic"
base_url = "http://127.0.0.1:1"
api_key = "k"

[[models]]
id = "off"
provider = "a"
auto_cache = false
input_price = 1
output_price = 1

[[models]]
id = "mixed"
auto_cache = false
input_price = 1
output_price = 1
[[models.routes]]
provider = "a"
upstream_id = "x"
[[models.routes]]
provider = "a"
upstream_id = "y"
auto_cache = true
""")
    models = load_config(path, environ={}).models
    assert models["off"].routes[0].auto_cache is False
    assert [r.auto_cache for r in models["mixed"].routes] == [False, True]
    # a chat client's own markers go through only where the operator said true (the spec keeps them out)
    assert [r.carry_cache_markers for r in models["mixed"].routes] == [False, True]
    assert defaults["claude-sonnet-4-5"].routes[0].carry_cache_markers is False
    with pytest.raises(ConfigError, match=r"models\[0\]\.auto_cache: must be true or false"):
        load_config(write(tmp_path, path.read_text().replace("auto_cache = false", 'auto_cache = "no"', 1)),
                    environ={})
