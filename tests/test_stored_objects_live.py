"""Tenants never reach each other's stored objects: official SDKs -> gatewayd -> simulator.

A response id reaches the provider only from the account that received it through gatewayd
(non-stream and stream answers both record it); any other id, a background run, a stored
prompt, file, vector store or container is a 400 naming the field, before the provider is
called: nothing is held, nothing charged, no usage row. On PostgreSQL an id received through
one instance is accepted on another.
"""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests import pg
from tests.live import Daemon, postgres_ready, unique_email

MODEL = "gpt-4.1-mini"  # passed through to the upstream's /v1/responses


def client(gateway, secret) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=secret, max_retries=0)


def fresh(gateway) -> tuple[dict, str]:
    account = gateway.admin.account(unique_email("stored"))
    return account, gateway.admin.key(account["id"])["secret"]


def untouched(gateway, sim, account: dict, marker: str) -> None:
    """Refused before the provider: nothing reached it, nothing held, charged or logged."""
    assert sim.requests(marker) == []
    balance = gateway.admin.balance(account["id"])
    assert (balance["held_nano"], balance["balance_nano"]) == (0, 10_000_000_000)
    assert gateway.admin.usage(account["id"]) == []


def refused(call) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as caught:
        call()
    assert caught.value.status_code == 400
    return caught.value


def test_an_accounts_own_response_id_is_forwarded_and_another_accounts_is_refused(gateway, sim):
    account_a, secret_a = fresh(gateway)
    account_b, secret_b = fresh(gateway)
    first = client(gateway, secret_a).responses.create(model=MODEL, input="first turn")
    assert first.id

    marker = f"second-{account_a['id']}"
    second = client(gateway, secret_a).responses.create(model=MODEL, input=marker, previous_response_id=first.id)
    assert second.status == "completed"
    assert sim.last_request(marker)["json"]["previous_response_id"] == first.id
    # the answer's own id is recorded too: the chain goes on
    third = f"third-{account_a['id']}"
    client(gateway, secret_a).responses.create(model=MODEL, input=third, previous_response_id=second.id)
    assert sim.last_request(third)["json"]["previous_response_id"] == second.id

    stolen = f"stolen-{account_b['id']}"
    error = refused(lambda: client(gateway, secret_b).responses.create(
        model=MODEL, input=stolen, previous_response_id=first.id))
    assert error.body["param"] == "previous_response_id"
    assert "was not received by this account" in error.body["message"]
    untouched(gateway, sim, account_b, stolen)
    for ref in ("resp_never_given", {"id": "conv_never_given"}):  # and ids nobody received
        error = refused(lambda: client(gateway, secret_a).responses.create(
            model=MODEL, input=stolen, conversation=ref))
        assert error.body["param"] in ("conversation", "conversation.id")
    assert sim.requests(stolen) == []


def test_a_streamed_response_id_is_recorded_when_the_stream_completes(gateway, sim):
    account_a, secret_a = fresh(gateway)
    _, secret_b = fresh(gateway)
    with client(gateway, secret_a).responses.stream(model=MODEL, input="stream first") as stream:
        final = stream.get_final_response()
    marker = f"after-stream-{account_a['id']}"
    with client(gateway, secret_a).responses.stream(
            model=MODEL, input=marker, previous_response_id=final.id) as stream:
        assert stream.get_final_response().status == "completed"
    assert sim.last_request(marker)["json"]["previous_response_id"] == final.id
    refused(lambda: client(gateway, secret_b).responses.create(model=MODEL, input="x", previous_response_id=final.id))
    with pytest.raises(openai.BadRequestError):  # a refused stream is a plain 400 before any event
        with client(gateway, secret_b).responses.stream(model=MODEL, input="x", previous_response_id=final.id):
            pass


STORED_RESPONSES = [
    ({"background": True}, "background"),
    ({"prompt": {"id": "pmpt_operator", "version": "1"}}, "prompt"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file-operator"}]}]},
     "input[0].content[0].file_id"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file-operator"}]}]},
     "input[0].content[0].file_id"),
    ({"tools": [{"type": "file_search", "vector_store_ids": ["vs_operator"]}]}, "tools[0].vector_store_ids"),
    ({"tools": [{"type": "code_interpreter", "container": "cntr_operator"}]}, "tools[0].container"),
]


@pytest.mark.parametrize("fields,param", STORED_RESPONSES)
def test_background_and_stored_objects_are_refused_on_responses(gateway, sim, fields, param):
    account, secret = fresh(gateway)
    marker = f"stored-{account['id']}"
    body = {"model": MODEL, "input": marker, **fields}
    if "input" in fields:
        body["input"] = [{"role": "user", "content": [{"type": "input_text", "text": marker}]}, *fields["input"]]
        param = param.replace("input[0]", "input[1]")
    for model in (MODEL, "claude-sonnet-4-5"):  # passed through or translated: the same refusal
        error = refused(lambda: client(gateway, secret).responses.create(**{**body, "model": model}))
        assert error.body["param"] == param and error.body["code"] == "invalid_request_error"
    untouched(gateway, sim, account, marker)


def test_file_ids_and_containers_are_refused_on_chat_and_messages(gateway, sim):
    account, secret = fresh(gateway)
    marker = f"files-{account['id']}"
    error = refused(lambda: client(gateway, secret).chat.completions.create(model=MODEL, messages=[
        {"role": "user", "content": [{"type": "text", "text": marker},
                                     {"type": "file", "file": {"file_id": "file-operator"}}]}]))
    assert error.body["param"] == "messages[0].content[1].file.file_id"

    claude = anthropic.Anthropic(base_url=gateway.url, api_key=secret, max_retries=0)
    for extra, content in (
        ({}, [{"type": "document", "source": {"type": "file", "file_id": "file_operator"}}]),
        ({}, [{"type": "container_upload", "file_id": "file_operator"}]),
        ({"container": "container_operator"}, []),
    ):
        with pytest.raises(anthropic.BadRequestError) as caught:
            claude.messages.create(model="claude-sonnet-4-5", max_tokens=50, extra_body=extra, messages=[
                {"role": "user", "content": [{"type": "text", "text": marker}, *content]}])
        assert caught.value.body["type"] == "error"  # the messages envelope
        assert caught.value.body["error"]["type"] == "invalid_request_error"
    untouched(gateway, sim, account, marker)


def test_codex_style_items_with_ids_and_store_false_pass(gateway, sim):
    """Input items carrying their own ids are content, not previous_response_id."""
    account, secret = fresh(gateway)
    marker = f"codex-{account['id']}"
    response = client(gateway, secret).responses.create(model=MODEL, store=False, input=[
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": marker}]},
        {"type": "reasoning", "id": "rs_from_before", "summary": [], "encrypted_content": "gAAAA"},
        {"type": "function_call", "id": "fc_from_before", "call_id": "call_1", "name": "shell", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "ok"},
    ])
    assert response.status == "completed"
    assert sim.last_request(marker)["json"]["input"][1]["id"] == "rs_from_before"


# -- two instances on one PostgreSQL database -----------------------------------------------


@pytest.fixture(scope="module")
def pair(sim, tmp_path_factory):
    if not postgres_ready():
        pytest.skip("no PostgreSQL on 127.0.0.1:5432")
    name, url = pg.create_database()
    env = {"GATEWAY_DATABASE_URL": url}
    one = Daemon(tmp_path_factory.mktemp("ids-1"), sim.url, env=env)
    two = Daemon(tmp_path_factory.mktemp("ids-2"), sim.url, env=env)
    yield one, two
    for d in (one, two):
        d.stop()
    pg.drop_database(name)


@pytest.mark.slow
def test_an_id_received_through_one_instance_is_accepted_on_the_other(pair, sim):
    one, two = pair
    account, secret = fresh(one)
    intruder = one.admin.account(unique_email("intruder"))
    intruder_secret = one.admin.key(intruder["id"])["secret"]
    first = client(one, secret).responses.create(model=MODEL, input="on instance one")
    marker = f"on-two-{account['id']}"
    for _ in range(100):  # the key reaches instance two through the change feed (well under a second)
        if httpx.get(two.url + "/v1/models", headers={"authorization": f"Bearer {secret}"}).status_code == 200:
            break
    client(two, secret).responses.create(model=MODEL, input=marker, previous_response_id=first.id)
    assert sim.last_request(marker)["json"]["previous_response_id"] == first.id
    for _ in range(100):
        if httpx.get(two.url + "/v1/models", headers={"authorization": f"Bearer {intruder_secret}"}).status_code == 200:
            break
    error = refused(lambda: client(two, intruder_secret).responses.create(
        model=MODEL, input="x", previous_response_id=first.id))
    assert error.body["param"] == "previous_response_id"
    assert one.admin.usage(intruder["id"]) == []
