"""Hosted tools priced by default (issue 32, point 8): a model whose config has no
``tool_prices`` gets its provider protocol's list prices; ``tool_prices = {}`` refuses them all,
and the refusal tells the client what to change and the operator what to configure."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest

from gatewayd.billing.features import require_prices, responses_asks
from gatewayd.billing.tool_prices import default_tool_prices
from gatewayd.config import load_config
from tests.inproc import Gateway

PROVIDERS = """
[[providers]]
name = "oai"
protocol = "openai"
base_url = "http://127.0.0.1:9/v1"
api_key = "k"

[[providers]]
name = "ant"
protocol = "anthropic"
base_url = "http://127.0.0.1:9"
api_key = "k"

[[providers]]
name = "aws"
protocol = "bedrock"
region = "us-east-1"
api_key = "bedrock-api-key"
"""


def models(tmp_path: Path, text: str):
    path = tmp_path / "gatewayd.toml"
    path.write_text(f'[server]\ndata_dir = "{tmp_path}"\n{PROVIDERS}\n{text}')
    return load_config(path, environ={}).models


def test_a_model_without_tool_prices_gets_its_providers_list_prices(tmp_path):
    found = models(tmp_path, """
[[models]]
id = "mine"
provider = "oai"
upstream_id = "gpt-4.1-mini"
input_price = 0.40
output_price = 1.60

[[models]]
id = "mine-reasoning"
provider = "oai"
reasoning = true
input_price = 1.10
output_price = 4.40

[[models]]
id = "claude"
provider = "ant"
input_price = 1
output_price = 5

[[models]]
id = "none"
provider = "oai"
input_price = 1
output_price = 1
tool_prices = {}

[[models]]
id = "own"
provider = "oai"
input_price = 1
output_price = 1
tool_prices = { web_search = 0.02 }

[[models]]
id = "bedrock-only"
provider = "aws"
upstream_id = "anthropic.claude-haiku"
input_price = 1
output_price = 1

[[models]]
id = "two-clouds"
input_price = 1
output_price = 1
[[models.routes]]
provider = "ant"
upstream_id = "claude-haiku-4-5"
[[models.routes]]
provider = "oai"
upstream_id = "some-model"
""")
    assert found["mine"].tool_prices == {"web_search": 25_000_000, "file_search": 2_500_000,
                                         "code_interpreter": 30_000_000}
    assert found["mine-reasoning"].tool_prices["web_search"] == 10_000_000
    assert found["claude"].tool_prices == {"web_search": 10_000_000, "web_fetch": 0}
    assert found["none"].tool_prices == {}
    assert found["own"].tool_prices == {"web_search": 20_000_000}  # replaces the list whole
    assert found["bedrock-only"].tool_prices == {}  # no list prices known for the protocol
    # several protocols: only what every one prices, at the highest price
    assert found["two-clouds"].tool_prices == {"web_search": 25_000_000}


def test_the_default_table_is_the_default_catalogues():
    """The figures the default catalogue writes out per model are this table's."""
    catalogue = load_config(None, environ={}).models
    assert catalogue["gpt-4.1"].tool_prices == default_tool_prices(["openai"], False)
    assert catalogue["o4-mini"].tool_prices == default_tool_prices(["openai"], True)
    assert catalogue["claude-haiku-4-5"].tool_prices == default_tool_prices(["anthropic"], False)
    assert catalogue["gemini-2.5-flash"].tool_prices == default_tool_prices(["gemini"], True)
    assert catalogue["gpt-4.1-nano"].tool_prices == default_tool_prices(["openai"], False)  # no key: the list
    assert catalogue["deepseek-chat"].tool_prices == {}  # DeepSeek has no hosted tools


def test_the_refusal_tells_the_client_and_the_operator_what_to_do(tmp_path):
    model = models(tmp_path, '[[models]]\nid = "none"\nprovider = "oai"\ninput_price = 1\noutput_price = 1\n'
                             'tool_prices = {}\n')["none"]
    body = {"model": "none", "input": "hi", "tools": [{"type": "web_search"}]}
    with pytest.raises(Exception) as caught:
        require_prices(model, responses_asks(body, model))
    error = caught.value
    assert getattr(error, "code", None) == "unpriced_feature" and error.status == 400
    assert "the hosted tool 'web_search' is not priced for model none" in error.message
    assert 'Codex: web_search = "disabled"' in error.message
    assert "tool_prices = { web_search = USD_PER_CALL }" in error.message


async def test_a_refused_hosted_tool_is_a_400_with_the_reason_in_the_log(tmp_path, caplog):
    def never(request: httpx.Request) -> httpx.Response:
        raise AssertionError("an unpriced tool reached the provider")

    gw = Gateway(tmp_path, never)
    try:
        _, secret = await gw.funded_key()
        body = {"model": "deepseek-chat", "messages": [{"role": "user", "content": "hi"}],
                "web_search_options": {}}
        caplog.set_level("INFO", logger="gatewayd.request")
        response = await gw.http.post("/v1/chat/completions", content=orjson.dumps(body),
                                      headers={"authorization": f"Bearer {secret}"})
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == "unpriced_feature"
        [line] = [r.fields for r in caplog.records if r.name == "gatewayd.request"]
        assert (line["error_code"], line["reason"]) == ("unpriced_feature", "the hosted tool 'web_search' has no price")
    finally:
        await gw.aclose()
