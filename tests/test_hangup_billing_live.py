"""A hang-up ends the request (issue 30, point 1), on SQLite and PostgreSQL.

A client that closes its stream mid-answer (httpx, the official SDKs, google-genai): its
slots are free while the provider still has most of the answer to write; the provider's
stream is closed within the hang-up grace (2 s), which the simulator sees as its client
leaving with most of a long answer unsent; the charge is the input plus the output produced
up to then, counted -- never the whole answer, never more than the hold.

Each answer here is 400 words at 50 ms a word (20 s); a client reads a few events and
leaves. Nothing asserts a time: the order of events is the check (the slots came back while
the simulator was still writing, and the simulator stopped with most of the answer unsent).
"""

from __future__ import annotations

import threading
import uuid

import httpx
import pytest

from tests.faults import PAID, chat_body, headers, messages_body, settled_row, sim_entry, wait_until
from tests.live import Daemon, unique_email

pytestmark = [pytest.mark.live, pytest.mark.slow]  # each waits out the 2 s grace

WORDS = 400  # 400 content events at 50 ms: 20 s of answer, of which a client reads a few
LONG = f"[[sim:words={WORDS}]] [[sim:fault=chunk_delay_ms:50]]"
CAP = 3  # the account's concurrent requests
MINI = (400, 1600)  # gpt-4.1-mini, nano-dollars a token (input, output)
HAIKU = (1000, 5000)  # claude-haiku-4-5


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def daemon(request, sim, tmp_path_factory):
    env = {}
    database = None
    if request.param == "postgres":
        from tests import pg
        from tests.conftest import _postgres_ready

        if not _postgres_ready():
            pytest.skip("no PostgreSQL on 127.0.0.1:5432 (or psycopg missing)")
        database, url = pg.create_database()
        env["GATEWAY_DATABASE_URL"] = url
    d = Daemon(tmp_path_factory.mktemp(f"hangup-{request.param}"), sim.url,
               server=f"max_concurrent_per_account = {CAP}\n", env=env)
    d.store_kind = request.param  # type: ignore[attr-defined]
    yield d
    d.stop()
    if database is not None:
        from tests import pg

        pg.drop_database(database)


def sqlite_only(daemon) -> None:
    """The surfaces differ in the gateway, not in the store: on PostgreSQL one of each kind is enough."""
    if daemon.store_kind != "sqlite":
        pytest.skip("run on SQLite; PostgreSQL runs the chat case of this kind")


def nonce() -> str:
    return "h" + uuid.uuid4().hex[:12]


def account(daemon) -> tuple[str, str]:
    a = daemon.admin.account(unique_email("hangup"))
    return a["id"], daemon.admin.key(a["id"])["secret"]


def assert_cut_short(sim, marker: str) -> dict:
    """The simulator saw its client (the gateway) leave with most of the answer unsent."""
    entry = wait_until(lambda: (e := sim_entry(sim, marker))["cancelled"] and e, 10,
                       "the simulator to see the gateway close the stream")
    assert entry["stream"] is True and entry["completed"] is False
    assert 0 < entry["events_sent"] < WORDS // 2, entry["events_sent"]
    return entry


def assert_charged_what_was_made(daemon, account_id: str, request_id: str, prices: tuple[int, int]) -> dict:
    row = settled_row(daemon, account_id, request_id, timeout=10)
    assert row["status"] == "client_disconnected", row
    assert 0 < row["output_tokens"] < WORDS // 2, row  # what was produced, not the whole answer
    assert row["cost_nano"] == row["input_tokens"] * prices[0] + row["output_tokens"] * prices[1]
    balance = daemon.admin.balance(account_id)
    assert balance["held_nano"] == 0
    assert balance["balance_nano"] == PAID - sum(r["cost_nano"] for r in daemon.admin.usage(account_id))
    return row


def read_some_then_close(url: str, path: str, secret: str, body: dict, params=None, events: int = 5) -> str:
    """httpx: read ``events`` events of the stream, then close it. Returns the request id."""
    with httpx.Client(timeout=30) as http:
        with http.stream("POST", url + path, json=body, params=params,
                         headers={**headers(secret), "x-goog-api-key": secret}) as response:
            assert response.status_code == 200, response.read()
            seen = 0
            for line in response.iter_lines():
                seen += line.startswith("data:")
                if seen >= events:
                    break
            return response.headers["x-request-id"]


GEMINI = "/v1beta/models/{model}:streamGenerateContent"


@pytest.mark.parametrize("path,model,prices", [
    ("/v1/chat/completions", "gpt-4.1-mini", MINI),
    ("/v1/messages", "claude-haiku-4-5", HAIKU),
    ("/v1/chat/completions", "claude-haiku-4-5", HAIKU),
    ("/v1/responses", "gpt-4.1-mini", MINI),
    (GEMINI, "gpt-4.1-mini", MINI),
], ids=["chat", "messages", "chat-via-messages", "responses", "gemini-api-via-chat"])
def test_an_httpx_client_closing_mid_answer_pays_what_was_made_and_the_provider_is_closed(
        daemon, sim, path, model, prices):
    if path != "/v1/chat/completions" or model != "gpt-4.1-mini":
        sqlite_only(daemon)
    account_id, secret = account(daemon)
    marker = nonce()
    text = f"{marker} {LONG}"
    params = None
    if path == GEMINI:
        body: dict = {"contents": [{"parts": [{"text": text}]}], "generationConfig": {"maxOutputTokens": 2000}}
        path, params = path.format(model=model), {"alt": "sse"}
    elif path == "/v1/responses":
        body = {"model": model, "input": text, "stream": True, "max_output_tokens": 2000}
    elif path == "/v1/messages":
        body = messages_body(text, model=model, max_tokens=2000)
    else:
        body = chat_body(text, model=model, max_tokens=2000)
    request_id = read_some_then_close(daemon.url, path, secret, body, params)
    assert_cut_short(sim, marker)
    assert_charged_what_was_made(daemon, account_id, request_id, prices)


def test_an_account_at_its_cap_gets_its_slots_back_when_its_clients_hang_up(daemon, sim):
    """Three streams at once fill the account's cap (a fourth is 429); their clients close
    them, and the account is served again while the simulator is still writing those answers."""
    account_id, secret = account(daemon)
    markers = [nonce() for _ in range(CAP)]
    ids: list[str] = []
    opened = threading.Barrier(CAP + 1)
    close = threading.Event()

    def one(marker: str) -> None:
        with httpx.Client(timeout=30) as http:
            with http.stream("POST", daemon.url + "/v1/chat/completions", headers=headers(secret),
                             json=chat_body(f"{marker} {LONG}", max_tokens=2000)) as response:
                assert response.status_code == 200
                ids.append(response.headers["x-request-id"])
                lines = response.iter_lines()
                next(lines)
                opened.wait(30)
                close.wait(30)

    threads = [threading.Thread(target=one, args=(m,)) for m in markers]
    for t in threads:
        t.start()
    opened.wait(30)
    refused = httpx.post(daemon.url + "/v1/chat/completions", headers=headers(secret),
                         json=chat_body("one more", stream=False), timeout=30)
    assert refused.status_code == 429, refused.text
    close.set()
    for t in threads:
        t.join(30)
    served = wait_until(lambda: (r := httpx.post(daemon.url + "/v1/chat/completions", headers=headers(secret),
                                                 json=chat_body("my turn", stream=False), timeout=30)
                                 ).status_code == 200 and r, 10, "the account to be served again")
    assert served.status_code == 200
    # the slots came back while the provider still had most of those answers to write
    assert all(not sim_entry(sim, m)["completed"] for m in markers)
    for marker in markers:
        assert_cut_short(sim, marker)
    for request_id in ids:
        assert_charged_what_was_made(daemon, account_id, request_id, MINI)


def test_the_openai_sdk_closing_a_stream_pays_what_was_made(daemon, sim):
    import openai

    account_id, secret = account(daemon)
    marker = nonce()
    client = openai.OpenAI(base_url=daemon.url + "/v1", api_key=secret, max_retries=0)
    stream = client.chat.completions.with_raw_response.create(
        model="gpt-4.1-mini", max_tokens=2000, stream=True,
        messages=[{"role": "user", "content": f"{marker} {LONG}"}])
    request_id = stream.headers["x-request-id"]
    chunks = stream.parse()
    for n, _ in enumerate(chunks):
        if n >= 4:
            break
    chunks.close()
    client.close()
    assert_cut_short(sim, marker)
    assert_charged_what_was_made(daemon, account_id, request_id, MINI)


def test_the_anthropic_sdk_closing_a_stream_pays_what_was_made(daemon, sim):
    import anthropic

    sqlite_only(daemon)
    account_id, secret = account(daemon)
    marker = nonce()
    client = anthropic.Anthropic(base_url=daemon.url, api_key=secret, max_retries=0)
    with client.messages.stream(model="claude-haiku-4-5", max_tokens=2000,
                                messages=[{"role": "user", "content": f"{marker} {LONG}"}]) as stream:
        request_id = stream.response.headers["x-request-id"]
        for n, _ in enumerate(stream.text_stream):
            if n >= 4:
                break
    client.close()
    assert_cut_short(sim, marker)
    assert_charged_what_was_made(daemon, account_id, request_id, HAIKU)


def test_a_google_genai_stream_cut_pays_what_was_made(daemon, sim):
    from google import genai
    from google.genai import types

    sqlite_only(daemon)
    account_id, secret = account(daemon)
    marker = nonce()
    client = genai.Client(api_key=secret, http_options=types.HttpOptions(base_url=daemon.url, api_version="v1beta"))
    stream = client.models.generate_content_stream(
        model="gpt-4.1-mini", contents=f"{marker} {LONG}",
        config=types.GenerateContentConfig(max_output_tokens=2000))
    for n, _ in enumerate(stream):
        if n >= 4:
            break
    stream.close()
    client.close()
    assert_cut_short(sim, marker)
    row = settled_row(daemon, account_id, timeout=10)
    assert_charged_what_was_made(daemon, account_id, row["request_id"], MINI)
