"""Sign-in with OpenID Connect (issue 34, point 3): the console against a real OIDC provider
run on loopback (``oidc-provider-mock``: discovery, JWKS, the code flow), and the ID token's
checks one by one against keys made here.
"""

from __future__ import annotations

import time
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from gatewayd.config_tables import ConfigError
from gatewayd.oidc import OidcClient, OidcError, OidcProvider, PendingFlow, read_providers
from tests.console_helpers import csrf_of
from tests.test_self_service import site

oidc_provider_mock = pytest.importorskip("oidc_provider_mock")
# the provider's own library (authlib, under oidc-provider-mock) warns about its internals
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:authlib")


def oidc_table(issuer: str, *, create: bool = True, domain: str | None = None) -> str:
    return (f'[[console.oidc]]\nname = "corp"\nlabel = "Corp SSO"\nissuer = "{issuer}"\nclient_id = "gatewayd-console"\n'
            f'client_secret_env = "OIDC_SECRET"\ncreate_accounts = {"true" if create else "false"}\n'
            + (f'allowed_domain = "{domain}"\n' if domain else ""))


def through_the_issuer(start: httpx.Response, subject: str) -> str:
    """What the browser does at the issuer: the consent form, then the redirect back. Returns
    the callback's query string."""
    assert start.status_code == 302, start.text
    authorize = start.headers["location"]
    query = parse_qs(urlsplit(authorize).query)
    assert query["code_challenge_method"] == ["S256"] and query["code_challenge"][0]
    assert query["state"][0] and query["nonce"][0] and "openid" in query["scope"][0].split()
    answer = httpx.post(authorize, data={"sub": subject}, follow_redirects=False)
    assert answer.status_code == 302, answer.text
    back = urlsplit(answer.headers["location"])
    assert back.path == "/console/oidc/corp/callback"
    return back.query


@pytest.fixture
def issuer():
    with oidc_provider_mock.run_server_in_thread() as server:
        url = f"http://localhost:{server.server_port}"
        for sub, claims in {
            "alice": {"email": "alice@corp.example", "email_verified": True, "name": "Alice"},
            "bob": {"email": "bob@elsewhere.example", "email_verified": True},
            "eve": {"email": "eve@corp.example", "email_verified": False},
        }.items():
            assert httpx.put(f"{url}/users/{sub}", json=claims).status_code == 204
        yield url


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
async def test_sign_in_with_the_issuer_opens_the_account_then_signs_it_in(tmp_path, store, issuer):
    async with site(tmp_path, store, extra=oidc_table(issuer, domain="corp.example"),
                    env={"OIDC_SECRET": "client secret"}) as s:
        signin = await s.http.get("/console/signin")
        assert "Sign in with Corp SSO" in signin.text
        callback = through_the_issuer(await s.http.get("/console/oidc/corp/start"), "alice")
        done = await s.http.get(f"/console/oidc/corp/callback?{callback}")
        assert done.status_code == 302 and done.headers["location"].endswith("/console/keys"), done.text
        account = s.console.directory.accounts_by_email["alice@corp.example"]
        assert account.name == "Alice" and account.password_hash is None and account.balance_nano == 0
        assert (await s.http.get("/console/keys")).status_code == 200
        # the same answer again: the flow was used up
        replay = await s.http.get(f"/console/oidc/corp/callback?{callback}")
        assert replay.status_code == 400 and "not started here" in replay.text

        # a second sign-in finds the account: no second one
        await s.http.post("/console/signout", data={"csrf_token": csrf_of((await s.http.get("/console/keys")).text)})
        callback = through_the_issuer(await s.http.get("/console/oidc/corp/start"), "alice")
        assert (await s.http.get(f"/console/oidc/corp/callback?{callback}")).status_code == 302
        assert [a.email for a in s.console.directory.accounts.values()].count("alice@corp.example") == 1


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
async def test_the_issuers_answer_is_checked(tmp_path, store, issuer):
    async with site(tmp_path, store, extra=oidc_table(issuer, domain="corp.example"),
                    env={"OIDC_SECRET": "client secret"}) as s:
        # another domain, an unverified email
        for subject, why in (("bob", "Only addresses @corp.example"), ("eve", "not verified")):
            callback = through_the_issuer(await s.http.get("/console/oidc/corp/start"), subject)
            refused = await s.http.get(f"/console/oidc/corp/callback?{callback}")
            assert refused.status_code == 400 and why in refused.text
        # a state that is not this browser's
        callback = through_the_issuer(await s.http.get("/console/oidc/corp/start"), "alice")
        forged = callback.replace("state=", "state=x")
        refused = await s.http.get(f"/console/oidc/corp/callback?{forged}")
        assert refused.status_code == 400 and "state" in refused.text
        # an answer that arrives in a browser that never started (the attacker's code in the victim's browser)
        stranger = httpx.AsyncClient(transport=s.http._transport, base_url="http://gateway.test")
        callback = through_the_issuer(await s.http.get("/console/oidc/corp/start"), "alice")
        assert (await stranger.get(f"/console/oidc/corp/callback?{callback}")).status_code == 400
        await stranger.aclose()
        assert "alice@corp.example" not in s.console.directory.accounts_by_email
        assert (await s.http.get("/console/oidc/other/start")).status_code == 404


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
async def test_no_account_is_opened_unless_the_provider_may_open_them(tmp_path, store, issuer):
    async with site(tmp_path, store, extra=oidc_table(issuer, create=False), env={"OIDC_SECRET": "x"}) as s:
        callback = through_the_issuer(await s.http.get("/console/oidc/corp/start"), "alice")
        refused = await s.http.get(f"/console/oidc/corp/callback?{callback}")
        assert refused.status_code == 403 and "no account" in refused.text
        await s.console.directory.create_account("alice@corp.example")
        callback = through_the_issuer(await s.http.get("/console/oidc/corp/start"), "alice")
        assert (await s.http.get(f"/console/oidc/corp/callback?{callback}")).status_code == 302


# -- the ID token's checks, against keys made here ------------------------------------------------

ISSUER = "https://idp.example"
PROVIDER = OidcProvider(name="idp", label="IdP", issuer=ISSUER, client_id="client-1", client_secret="s")


class Issuer:
    """An issuer's three documents served by an httpx transport; ``id_token`` is what the
    token endpoint answers (the edge we cannot reach: a real IdP on the internet)."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = "k1"
        self.published: list = [(self.kid, self.key)]
        self.id_token = ""
        self.jwks_fetches = 0

    def jwks(self) -> dict:
        keys = []
        for kid, key in self.published:
            jwk = jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
            keys.append({**jwk, "kid": kid, "use": "sig", "alg": "RS256"})
        return {"keys": keys}

    def handler(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/.well-known/openid-configuration":
            return httpx.Response(200, json={
                "issuer": ISSUER, "authorization_endpoint": f"{ISSUER}/auth", "token_endpoint": f"{ISSUER}/token",
                "jwks_uri": f"{ISSUER}/jwks", "id_token_signing_alg_values_supported": ["RS256"]})
        if path == "/jwks":
            self.jwks_fetches += 1
            return httpx.Response(200, json=self.jwks())
        if path == "/token":
            return httpx.Response(200, json={"id_token": self.id_token, "access_token": "a", "token_type": "Bearer"})
        return httpx.Response(404)

    def sign(self, claims: dict, *, key=None, kid=None, alg="RS256") -> str:
        return jwt.encode(claims, key if key is not None else self.key, algorithm=alg,
                          headers={"kid": kid or self.kid})


def claims(nonce: str, **over) -> dict:
    now = int(time.time())
    return {"iss": ISSUER, "aud": "client-1", "sub": "u1", "iat": now, "exp": now + 300, "nonce": nonce,
            "email": "u1@example.com", "email_verified": True, **over}


async def finish_with(idp: Issuer, client: OidcClient, token_for) -> object:
    _, flow = await client.start(PROVIDER, "https://gw/callback")
    idp.id_token = token_for(flow)
    return await client.finish(PROVIDER, flow, {"state": flow.state, "code": "c"}, "https://gw/callback")


async def test_id_token_checks():
    idp = Issuer()
    client = OidcClient(httpx.AsyncClient(transport=httpx.MockTransport(idp.handler)))
    identity = await finish_with(idp, client, lambda f: idp.sign(claims(f.nonce)))
    assert identity.email == "u1@example.com" and identity.subject == "u1"
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    refused = {
        "another key": lambda f: idp.sign(claims(f.nonce), key=other_key),
        "another audience": lambda f: idp.sign(claims(f.nonce, aud="client-2")),
        "another issuer": lambda f: idp.sign(claims(f.nonce, iss="https://evil.example")),
        "expired": lambda f: idp.sign(claims(f.nonce, exp=int(time.time()) - 3600)),
        "another nonce": lambda f: idp.sign(claims("not the nonce")),
        "no nonce": lambda f: idp.sign({k: v for k, v in claims(f.nonce).items() if k != "nonce"}),
        "alg none": lambda f: jwt.encode(claims(f.nonce), None, algorithm="none"),
        "HMAC with the public key": lambda f: jwt.encode(claims(f.nonce), "secret", algorithm="HS256",
                                                         headers={"kid": idp.kid}),
        "several audiences, azp another client": lambda f: idp.sign(claims(f.nonce, aud=["client-1", "x"],
                                                                           azp="x")),
        "no email": lambda f: idp.sign({k: v for k, v in claims(f.nonce).items() if k != "email"}),
    }
    for why, token_for in refused.items():
        with pytest.raises(OidcError):
            await finish_with(idp, client, token_for)
            pytest.fail(f"accepted: {why}")
    await client.aclose()


async def test_rotated_keys_are_fetched_again_at_most_once_a_minute():
    idp = Issuer()
    now = [1_900_000_000.0]
    client = OidcClient(httpx.AsyncClient(transport=httpx.MockTransport(idp.handler)), clock=lambda: now[0])
    real_time = time.time

    def token(f: PendingFlow) -> str:
        c = claims(f.nonce)
        c.update(iat=int(real_time()), exp=int(real_time()) + 300)
        return idp.sign(c)

    await finish_with(idp, client, token)
    assert idp.jwks_fetches == 1
    await finish_with(idp, client, token)
    assert idp.jwks_fetches == 1  # cached
    idp.key, idp.kid = rsa.generate_private_key(public_exponent=65537, key_size=2048), "k2"
    idp.published = [("k2", idp.key)]
    now[0] += JWKS_WAIT
    await finish_with(idp, client, token)  # unknown kid: the set is fetched again
    assert idp.jwks_fetches == 2
    idp.kid = "k3"  # a kid nobody publishes, right after a fetch: no new fetch, refused
    with pytest.raises(OidcError, match="does not publish"):
        await finish_with(idp, client, token)
    assert idp.jwks_fetches == 2
    await client.aclose()


JWKS_WAIT = 61


async def test_a_flow_too_old_or_refused_by_the_issuer_goes_no_further():
    idp = Issuer()
    now = [1_900_000_000.0]
    client = OidcClient(httpx.AsyncClient(transport=httpx.MockTransport(idp.handler)), clock=lambda: now[0])
    _, flow = await client.start(PROVIDER, "https://gw/cb")
    with pytest.raises(OidcError, match="refused"):
        await client.finish(PROVIDER, flow, {"state": flow.state, "error": "access_denied"}, "https://gw/cb")
    now[0] += 601
    with pytest.raises(OidcError, match="too long"):
        await client.finish(PROVIDER, flow, {"state": flow.state, "code": "c"}, "https://gw/cb")
    await client.aclose()


def test_oidc_config_is_checked_at_start():
    table = {"name": "corp", "issuer": "https://idp.example", "client_id": "c", "client_secret_env": "S"}
    with pytest.raises(ConfigError, match="S is not set"):
        read_providers([table], {})
    with pytest.raises(ConfigError, match="given twice"):
        read_providers([table, table], {"S": "x"})
    with pytest.raises(ConfigError, match="name"):
        read_providers([{**table, "name": "a b"}], {"S": "x"})
    (provider,) = read_providers([{**table, "scopes": ["profile"], "allowed_domain": "@Corp.Example"}], {"S": "x"})
    assert provider.scopes == ("openid", "profile", "email") and provider.allowed_domain == "corp.example"
    from gatewayd.self_service import read_settings

    with pytest.raises(ConfigError, match="public_url"):
        read_settings({"oidc": [table]}, mail_configured=False, env={"S": "x"})
