"""Who is calling and what they may do: the gateway's checks, in the spec's order.

key -> IP -> (body, parsed by the handler) -> model list -> group -> availability ->
price -> rate limit -> (holds, in billing). Every refusal here happens before any
money is held, so none of them is ever charged.
"""

from __future__ import annotations

import difflib
import ipaddress
import time
from fractions import Fraction

import attrs

from gatewayd.config import Config, Group, Model
from gatewayd.directory import Directory
from gatewayd.errors import GatewayError, invalid_token, model_not_found
from gatewayd.money import usd_brief
from gatewayd.records import Account, Key


@attrs.frozen
class Caller:
    key: Key
    account: Account


def presented_secret(headers, *, key_headers: tuple[str, ...] = (),
                     query_key: str | None = None) -> str | None:
    """``Authorization: Bearer`` everywhere; then, only where the endpoint reads them, its key
    headers (``x-api-key``: Anthropic's SDKs; ``x-goog-api-key``: Google's) and last a key in
    the query (``query_key``: the value of Gemini's ``?key=``)."""
    auth = headers.get("authorization")
    if auth:
        scheme, _, token = auth.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
        return None
    for name in key_headers:
        value = headers.get(name)
        if value and value.strip():
            return value.strip()
    if query_key and query_key.strip():
        return query_key.strip()
    return None


def authenticate(directory: Directory, headers, *, key_headers: tuple[str, ...] = (),
                 query_key: str | None = None, now: float | None = None) -> Caller:
    secret = presented_secret(headers, key_headers=key_headers, query_key=query_key)
    if secret is None:
        raise invalid_token(_absent_key_reason(headers, key_headers, query_key))
    key = directory.key_for_secret(secret)
    if key is None:
        raise invalid_token("no key has this secret (mistyped, or another gateway's)")
    state = key.state(time.time() if now is None else now)
    if state != "enabled":
        raise invalid_token(f"key {key.id} is {_STATE_WORDS.get(state, state)}")
    return Caller(key=key, account=directory.accounts[key.account_id])


_STATE_WORDS = {"deleted": "revoked", "used_up": "used up (spend limit reached)"}

# the headers some client may put a key in, for telling the operator which one an endpoint ignored
_OTHER_KEY_HEADERS = ("x-api-key", "x-goog-api-key", "api-key")


def _absent_key_reason(headers, key_headers: tuple[str, ...], query_key: str | None) -> str:
    """Why no key was read, for the operator's log (the client gets the spec's one 401)."""
    auth = headers.get("authorization")
    if auth is not None:
        return "Authorization header is not 'Bearer <key>'"
    ignored = [name for name in _OTHER_KEY_HEADERS if name not in key_headers and headers.get(name)]
    if ignored:
        return f"key sent in {ignored[0]}, which this endpoint does not read"
    return "no key presented"


def _unmapped(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """``::ffff:10.0.0.1`` (an IPv4 peer on a dual-stack socket) is 10.0.0.1 for every rule."""
    return ip.ipv4_mapped or ip if ip.version == 6 else ip


def client_address(peer: str | None, forwarded_for: str | None, trusted: tuple) -> str | None:
    """The socket peer, unless the peer is a trusted proxy: then the right-most
    ``X-Forwarded-For`` address that is not itself a trusted proxy."""
    if peer is None:
        return None
    try:
        peer_ip = _unmapped(ipaddress.ip_address(peer))
    except ValueError:
        return peer
    if not trusted or not forwarded_for or not any(peer_ip in net for net in trusted):
        return str(peer_ip)
    for hop in reversed([h.strip() for h in forwarded_for.split(",") if h.strip()]):
        try:
            hop_ip = _unmapped(ipaddress.ip_address(hop.strip("[]")))
        except ValueError:
            return str(peer_ip)  # a malformed hop: trust nothing left of it
        if not any(hop_ip in net for net in trusted):
            return str(hop_ip)
    return str(peer_ip)


def check_ip(key: Key, address: str | None) -> None:
    if key.allow_ips is None:
        return
    try:
        ip = ipaddress.ip_address(address) if address else None
    except ValueError:
        ip = None
    if ip is not None and ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip is None or not any(ip in net for net in key.allow_ips):
        raise GatewayError(403, f"Your IP {address} is not allowed to use this token", "access_denied")


@attrs.frozen
class Grant:
    model: Model
    price_ratio: Fraction
    group: str
    alias: str | None = None  # the id the request named, when it was an alias of ``model``


def caller_group(config: Config, caller: Caller) -> Group:
    """The group whose prices (and MCP list) apply to the caller: the key's pin, else the first
    of the account's groups still in force, else ``default``; a pin the account cannot use, or
    to a retired group, is the spec's 403."""
    key, account = caller.key, caller.account
    group_name = key.group
    if group_name is not None:
        if group_name not in account.groups:
            raise GatewayError(403, f"This token is pinned to group {group_name}, which this account cannot use", "")
        group = config.groups.get(group_name)
        if group is None or group.retired:
            raise GatewayError(403, f"This token is pinned to group {group_name}, which has been retired", "")
        return group
    return next(
        (config.groups[g] for g in account.groups if g in config.groups and not config.groups[g].retired),
        config.groups["default"],
    )


def authorize_model(config: Config, caller: Caller, model_id: str, *, kind: str, endpoint: str) -> Grant:
    """Model list, group, availability, price: the checks between the body and the rate limit.

    Each refusal keeps the spec's status and code and says which case it is and what to do
    (the SDKs retry a 503: a message that explains is what tells a person to stop)."""
    key, account = caller.key, caller.account
    model, alias = config.model(model_id)
    if key.models is not None and model_id not in key.models and (model is None or model.id not in key.models):
        allowed = ", ".join(sorted(key.models)) or "none"
        raise GatewayError(403, f"This token has no access to model {model_id}; this key may use: {allowed} "
                           "(GET /v1/models lists them)", "", reason="model not on the key's model list")
    group = caller_group(config, caller)
    threshold = config.server.models_visible_after_paid_nano
    if account.total_paid_nano < threshold:
        more = threshold - account.total_paid_nano
        raise model_not_found(
            model_id, f"this account can use models once its total paid reaches {usd_brief(threshold)}; it has paid "
            f"{usd_brief(account.total_paid_nano)} so far, so {usd_brief(more)} more is needed (the console's "
            "Balance page shows Total paid)", reason="account under the visibility threshold")
    if model is None:
        raise model_not_found(model_id, _unknown_model_hint(config, caller, model_id), reason="unknown model id")
    if not any(route.usable for route in model.routes):
        missing = sorted({r.provider.missing_key_env or "" for r in model.routes})
        raise model_not_found(
            model_id, f"its provider has no API key on this gateway (the operator sets {', '.join(missing)} and "
            "restarts or reloads)", reason=f"provider left out: {', '.join(missing)} not set")
    if model.kind == "embedding" and model.id not in account.embedding_models:
        raise model_not_found(
            model_id, "this embedding model is not enabled for this account; the gateway's operator enables it "
            "(gatewayctl account embeddings ACCOUNT MODEL --enable)", reason="embedding model not enabled for the account")
    if model.kind != kind:
        if kind == "embedding":
            raise GatewayError(400, f"{model_id} is a chat model; /v1/embeddings takes an embedding model",
                               "invalid_model", param="model")
        raise GatewayError(400, f"{model_id} is an embedding model; call it through /v1/embeddings",
                           "invalid_model", param="model")
    if endpoint == "messages" and "messages" not in model.client_formats:
        raise GatewayError(
            400,
            f"model {model_id} is not available on /v1/messages; call it through /v1/chat/completions",
            "invalid_model",
            param="model",
        )
    if not model.priced:
        raise GatewayError(400, f"model {model_id} is listed but has no price yet; the gateway's operator sets its "
                           "input_price and output_price", "model_price_error", reason="model has no price")
    return Grant(model=model, price_ratio=group.price_ratio, group=group.name, alias=alias)


def _unknown_model_hint(config: Config, caller: Caller, model_id: str) -> str:
    """The closest ids this caller may use (never the ones it may not: the catalogue past what
    GET /v1/models lists is not told), and where the full list is."""
    ids = [m.id for m in visible_models(config, caller)]
    close = difflib.get_close_matches(model_id, ids, n=3, cutoff=0.5)
    if not close:  # a prefix (a dated or shortened id) is close too
        stem = model_id.split("-20")[0]
        close = [i for i in ids if i.startswith(stem) or stem.startswith(i)][:3]
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return f"no model with this id on this gateway; {hint}GET /v1/models lists the models this key may use"


def visible_models(config: Config, caller: Caller) -> list[Model]:
    """What GET /v1/models lists: the key's list (or everything), once the account may see models."""
    account, key = caller.account, caller.key
    if account.total_paid_nano < config.server.models_visible_after_paid_nano:
        return []
    if key.group is not None:
        group = config.groups.get(key.group)
        if key.group not in account.groups or group is None or group.retired:
            return []  # pinned to a group it cannot use: every model request is refused, so none is listed
    out = []
    for model in config.models.values():
        if not any(route.usable for route in model.routes):
            continue  # its provider was left out (an unset key variable): refused, saying why
        if key.models is not None and model.id not in key.models:
            continue
        if model.kind == "embedding" and model.id not in account.embedding_models:
            continue
        out.append(model)
    return out
