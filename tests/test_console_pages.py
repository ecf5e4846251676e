"""The Models page and what the Balance page promises (issue 32, point 7), in process: the real
console over a SQLite file, signed in through the real sign-in form."""

from __future__ import annotations

import re

import pytest

from gatewayd.console.formatting import per_million, usd_html
from tests.console_helpers import csrf_of
from tests.test_self_service import Site, site

PASSWORD = "the holder's password"


async def signed_in(s: Site, email: str, paid_nano: int):
    account = await s.console.directory.create_account(email, password=PASSWORD)
    if paid_nano:
        await s.console.directory.pay(account, paid_nano)
    token = csrf_of((await s.http.get("/console/signin")).text)
    done = await s.http.post("/console/signin", data={"email": email, "password": PASSWORD, "csrf_token": token})
    assert done.status_code == 302, done.text
    return account


def row_of(html: str, model_id: str) -> str:
    start = html.index(f'data-model="{model_id}"')
    return html[start:html.index("</tr>", start)]


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
async def test_models_page_shows_each_models_prices_before_a_call(tmp_path, store):
    async with site(tmp_path, store, signup="off") as s:
        await signed_in(s, "holder@example.com", 10 * 10**9)
        page = await s.http.get("/console/models")
        assert page.status_code == 200
        config = s.console.config
        assert 'id="visibility"' not in page.text  # paid past the threshold
        for model in config.models.values():
            row = row_of(page.text, model.id)
            if model.priced and model.kind == "chat":
                for price in (model.input_price, model.output_price, model.cached_input_price or model.input_price):
                    assert str(per_million(price)) in row, (model.id, price)
            if not model.priced:
                assert "Not priced yet" in row
            if model.kind == "embedding":
                assert "Not enabled for this account" in row and "/v1/embeddings" in row
                assert "/v1/chat/completions" not in row
            else:
                assert "/v1/embeddings" not in row and "/v1/chat/completions" in row
            if "messages" in model.client_formats:
                assert "/v1/messages" in row
            for tool, nano in model.tool_prices.items():
                assert f"{tool}: {usd_html(nano * 1000)} per 1,000 calls" in row
        assert "6 decimal places" in page.text


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
async def test_models_page_says_how_much_more_must_be_paid(tmp_path, store):
    async with site(tmp_path, store, signup="off") as s:
        await signed_in(s, "new@example.com", 2 * 10**9)
        page = await s.http.get("/console/models")
        notice = re.search(r'id="visibility">(.*?)</div>', page.text, re.S)
        assert notice is not None
        assert f"{usd_html(3 * 10**9)} in total: {usd_html(10**9)} more" in notice.group(1)


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
async def test_the_alert_form_promises_only_what_is_configured(tmp_path, store):
    async with site(tmp_path, store, signup="off", mail=False) as s:
        account = await signed_in(s, "holder@example.com", 10 * 10**9)
        page = await s.http.get("/console/balance")
        state = re.search(r'id="alert-state">(.*?)</p>', page.text, re.S).group(1)
        assert "email" not in state.replace("sends no email", "") and "sends no email" in state
        await s.console.directory.set_alert_below(account, 5 * 10**9)
        state = re.search(r'id="alert-state">(.*?)</p>', (await s.http.get("/console/balance")).text, re.S).group(1)
        assert "nothing is sent until its operator configures one" in state
    async with site(tmp_path, store, signup="off", mail=True) as s:
        account = await signed_in(s, "other@example.com", 10 * 10**9)
        await s.console.directory.set_alert_below(account, 5 * 10**9)
        state = re.search(r'id="alert-state">(.*?)</p>', (await s.http.get("/console/balance")).text, re.S).group(1)
        assert "you get an email at other@example.com" in state
