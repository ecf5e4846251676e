"""The spec's "Not offered" list, walked end to end against a live daemon.

Each endpoint answers 404 or 501 (code ``api_not_implemented`` for 501) in the chat
error envelope with the request id in the message and in ``X-Request-Id``, whatever the
method, key or headers; never a 500, never a hang, nothing sent upstream, nothing charged.
"""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")

# (what the spec calls it, paths a client of that API would call)
NOT_OFFERED = [
    ("files", ["/v1/files", "/v1/files/file-abc123", "/v1/files/file-abc123/content"]),
    ("uploads", ["/v1/uploads", "/v1/uploads/upload_1/parts", "/v1/uploads/upload_1/complete"]),
    ("fine-tuning", ["/v1/fine_tuning/jobs", "/v1/fine_tuning/jobs/ftjob-1", "/v1/fine_tuning/jobs/ftjob-1/cancel",
                     "/v1/fine_tuning/jobs/ftjob-1/events", "/v1/fine-tunes"]),
    ("image variations", ["/v1/images/variations"]),
    ("assistants", ["/v1/assistants", "/v1/assistants/asst_1"]),
    ("threads", ["/v1/threads", "/v1/threads/thread_1", "/v1/threads/thread_1/messages",
                 "/v1/threads/thread_1/runs", "/v1/threads/thread_1/runs/run_1/submit_tool_outputs",
                 "/v1/threads/runs"]),
    ("batches", ["/v1/batches", "/v1/batches/batch_1", "/v1/batches/batch_1/cancel"]),
    ("stored responses", ["/v1/responses/resp_abc123", "/v1/responses/resp_abc123/input_items",
                          "/v1/responses/resp_abc123/cancel"]),
    ("count_tokens", ["/v1/messages/count_tokens"]),
    ("message batches", ["/v1/messages/batches", "/v1/messages/batches/msgbatch_1",
                         "/v1/messages/batches/msgbatch_1/results", "/v1/messages/batches/msgbatch_1/cancel"]),
    ("vector stores", ["/v1/vector_stores", "/v1/vector_stores/vs_1/files"]),
]
CASES = [(path, method) for _, paths in NOT_OFFERED for path in paths for method in METHODS]
CASES += [("/v1/models/gpt-4.1-mini", "DELETE"), ("/v1/models/ft:gpt-4o-mini:org:custom:abc", "DELETE")]

OPENAI_HEADERS = {"content-type": "application/json"}
MESSAGES_HEADERS = {"anthropic-version": "2023-06-01", "anthropic-beta": "files-api-2025-04-14,message-batches-2024-09-24",
                    "content-type": "application/json"}


def assert_not_offered(r: httpx.Response) -> dict:
    assert r.status_code in (404, 501), f"{r.request.method} {r.request.url.path} -> {r.status_code}: {r.text}"
    request_id = r.headers["x-request-id"]
    assert request_id.startswith("req_")
    assert r.headers["content-type"].startswith("application/json")
    doc = r.json()
    assert set(doc) == {"error"}
    error = doc["error"]
    assert isinstance(error["type"], str) and error["type"]
    assert error["message"].endswith(f" (request id: {request_id})")
    if r.status_code == 501:
        assert error["code"] == "api_not_implemented"
        assert "not offered" in error["message"]
    else:
        assert error["param"] is None
    return error


@pytest.fixture(scope="module")
def secret(gateway):
    from tests.live import unique_email

    account = gateway.admin.account(unique_email("not-offered"))
    return account, gateway.admin.key(account["id"])["secret"]


def test_the_whole_list_with_every_method(gateway, sim, secret):
    account, key = secret
    seen_before = len(sim.requests())
    statuses = set()
    with httpx.Client(base_url=gateway.url, timeout=10) as http:
        for path, method in CASES:
            body = b'{"model": "gpt-4.1-mini", "input": "x"}' if method in ("POST", "PUT", "PATCH") else None
            r = http.request(method, path, content=body, headers={**OPENAI_HEADERS, "authorization": f"Bearer {key}"})
            assert_not_offered(r)
            statuses.add(r.status_code)
    assert statuses == {501}  # every listed endpoint is told apart from a mistyped path
    assert len(sim.requests()) == seen_before  # nothing reached a provider
    assert gateway.admin.usage(account["id"]) == []
    assert gateway.admin.balance(account["id"])["balance_nano"] == 10_000_000_000


@pytest.mark.parametrize("headers", [
    {},  # no key at all
    {"authorization": "Bearer sk-not-a-real-key"},
    {"x-api-key": "sk-not-a-real-key", **MESSAGES_HEADERS},
], ids=["no-key", "bad-key", "messages-client"])
def test_same_answer_whatever_the_key(gateway, headers):
    with httpx.Client(base_url=gateway.url, timeout=10) as http:
        for path in ("/v1/files", "/v1/responses/resp_1", "/v1/messages/count_tokens", "/v1/messages/batches",
                     "/v1/batches/batch_1"):
            for method in ("GET", "POST", "DELETE"):
                assert_not_offered(http.request(method, path, headers=headers))
        assert_not_offered(http.delete("/v1/models/gpt-4.1-mini", headers=headers))


def test_messages_files_api_with_its_headers(gateway, secret):
    """The messages-format Files API shares /v1/files; its clients send x-api-key and a beta header."""
    _, key = secret
    headers = {**MESSAGES_HEADERS, "x-api-key": key}
    with httpx.Client(base_url=gateway.url, timeout=10) as http:
        for method, path in [("GET", "/v1/files"), ("POST", "/v1/files"), ("GET", "/v1/files/file_011abc"),
                             ("GET", "/v1/files/file_011abc/content"), ("DELETE", "/v1/files/file_011abc"),
                             ("POST", "/v1/messages/count_tokens?beta=true"),
                             ("POST", "/v1/messages/batches?beta=true")]:
            error = assert_not_offered(http.request(method, path, headers=headers))
            assert error["code"] == "api_not_implemented"


@pytest.mark.parametrize("path", [
    "/v1/files/file-abc%2Fdef", "/v1/assistants/..%2F..%2Fadmin", "/v1/threads/%E2%9C%93/runs",
    "/v1/responses/%00", "/v1/batches/" + "b" * 5000, "/v1/files?purpose=assistants&limit=-1",
])
def test_odd_ids_never_500(gateway, path):
    r = httpx.get(gateway.url + path, timeout=10)
    assert_not_offered(r)


def test_image_variation_upload_is_refused_without_500(gateway, secret):
    _, key = secret
    r = httpx.post(gateway.url + "/v1/images/variations", headers={"authorization": f"Bearer {key}"},
                   files={"image": ("cat.png", b"\x89PNG\r\n\x1a\n" + b"\0" * 50_000, "image/png")},
                   data={"n": "1", "size": "256x256"}, timeout=10)
    assert r.status_code == 501 and assert_not_offered(r)["code"] == "api_not_implemented"


def test_an_unknown_path_is_a_plain_404(gateway):
    r = httpx.get(gateway.url + "/v1/no-such-thing", timeout=10)
    error = assert_not_offered(r)
    assert r.status_code == 404 and error["code"] == "not_found"


# -- what the official SDKs see --------------------------------------------------------------


def _openai(gateway, key) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)


@pytest.mark.parametrize("call", [
    lambda c: c.files.list(),
    lambda c: c.files.retrieve("file-abc"),
    lambda c: c.files.create(file=("data.jsonl", b"{}\n"), purpose="batch"),
    lambda c: c.fine_tuning.jobs.create(model="gpt-4.1-mini", training_file="file-abc"),
    lambda c: c.images.create_variation(image=("cat.png", b"\x89PNG\r\n\x1a\n")),
    lambda c: c.beta.assistants.list(),
    lambda c: c.beta.threads.create(),
    lambda c: c.batches.create(completion_window="24h", endpoint="/v1/chat/completions", input_file_id="file-abc"),
    lambda c: c.models.delete("gpt-4.1-mini"),
    lambda c: c.responses.retrieve("resp_abc123"),
    lambda c: c.responses.delete("resp_abc123"),
    lambda c: c.responses.input_items.list("resp_abc123"),
    lambda c: c.responses.cancel("resp_abc123"),
], ids=["files.list", "files.retrieve", "files.create", "fine_tuning", "image_variation", "assistants",
        "threads", "batches", "models.delete", "responses.retrieve", "responses.delete", "input_items",
        "responses.cancel"])
def test_openai_sdk_gets_501(gateway, secret, call):
    _, key = secret
    with pytest.raises(openai.APIStatusError) as caught:
        call(_openai(gateway, key))
    error = caught.value
    assert error.status_code == 501
    assert error.body["code"] == "api_not_implemented"
    assert error.response.headers["x-request-id"] in error.body["message"]


@pytest.mark.parametrize("call", [
    lambda c: c.messages.count_tokens(model="claude-sonnet-4-5", messages=[{"role": "user", "content": "hi"}]),
    lambda c: c.messages.batches.list(),
    lambda c: c.messages.batches.create(requests=[{"custom_id": "a", "params": {
        "model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}}]),
    lambda c: c.beta.files.list(),
    lambda c: c.beta.files.upload(file=("doc.txt", b"hello", "text/plain")),
    lambda c: c.beta.files.delete("file_011abc"),
], ids=["count_tokens", "batches.list", "batches.create", "files.list", "files.upload", "files.delete"])
def test_anthropic_sdk_gets_501(gateway, secret, call):
    _, key = secret
    c = anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as caught:
        call(c)
    error = caught.value
    assert error.status_code == 501
    assert error.body["error"]["code"] == "api_not_implemented"
    assert error.response.headers["x-request-id"] in error.body["error"]["message"]


# -- answering before the request body arrived ------------------------------------------------


def _read_answer(sock) -> bytes | None:
    """The bytes of one answer, b"" if the server closed, None if it sent nothing for 3 s."""
    import socket

    sock.settimeout(3)
    data = b""
    try:
        while True:
            head, sep, rest = data.partition(b"\r\n\r\n")
            if sep:
                length = int(next((line.split(b":", 1)[1] for line in head.split(b"\r\n")
                                   if line.lower().startswith(b"content-length:")), b"0"))
                if len(rest) >= length:
                    return data
            chunk = sock.recv(65536)
            if not chunk:
                return data
            data += chunk
    except socket.timeout:
        return None
    except ConnectionResetError:
        return b""


@pytest.mark.parametrize("path", ["/v1/files", "/v1/responses/resp_1", "/v1/no-such-thing"])
def test_next_keep_alive_request_never_hangs_when_the_body_came_late(gateway, path):
    """A 501/404 goes out before the request body is read. When the body arrives after the
    answer (clients write headers and body apart), the connection must be either reused or
    closed: the next request on it gets an answer or EOF, never silence (it used to hang)."""
    import socket
    from urllib.parse import urlsplit

    address = urlsplit(gateway.url)
    body = b'{"model": "gpt-4.1-mini", "input": "late body"}'
    outcomes = set()
    for _ in range(15):
        with socket.create_connection((address.hostname, address.port)) as sock:
            sock.sendall(b"POST %s HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % (path.encode(), len(body)))
            first = _read_answer(sock)
            assert first and first.split(b" ", 2)[1] in (b"404", b"501"), first
            try:
                sock.sendall(body)
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                outcomes.add("closed")
                continue
            second = _read_answer(sock)
            assert second is not None, "the server neither answered nor closed the connection"
            outcomes.add("answered" if second.startswith(b"HTTP/1.1 200") else "closed")
    assert outcomes <= {"answered", "closed"}


def test_an_answer_before_the_body_arrived_closes_the_connection(gateway):
    """A 501 answered before the request body came in: hypercorn will not recycle that
    connection, so the answer must say ``connection: close`` (a keep-alive client would
    otherwise send its next request into a closing socket and get no answer)."""
    import socket
    from urllib.parse import urlsplit

    url = urlsplit(gateway.url)
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/files HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
                     b"content-length: 20\r\n\r\n")  # the body is never sent
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(65536)
            assert chunk, "the gateway closed the connection without answering"
            head += chunk
    status_line, *header_lines = head.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    assert b" 501 " in status_line
    headers = [line.lower() for line in header_lines]
    assert b"connection: close" in headers, headers
