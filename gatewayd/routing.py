"""Which route serves a request: priority, weight, conversation stickiness and route health.

A model has one or more routes (a provider and the provider's id for the model). For each
request the ``Router`` gives the order in which the relay tries them:

1. the route that served this conversation's previous turn, while it is available;
2. then the available routes by priority, highest first; among equal priorities an order
   drawn by weight (a route of weight 3 comes first three times as often as one of
   weight 1): for a request of a known conversation, by rendezvous hashing of its key (the
   same order in every process), otherwise at random;
3. last, the routes that are cooling down, the one whose cool-down ends first leading:
   when every route is cooling, a request is still tried rather than refused, and the
   provider answers for itself.

Health is kept per route (``provider/upstream_id``) in this process, and per provider
(reachable or not: ``provider_seen``). A route that fails
``failures_to_cool`` times in a row, or whose provider sends ``Retry-After`` with a 429 or
5xx, is cooled down: skipped while another route is available. When the cool-down ends
one request probes it (half-open); success makes it healthy, failure cools it again for
twice as long (up to ``max_cooldown_s``).

Stickiness keeps a conversation on one provider so the provider's prompt cache keeps
hitting: the key is the client's ``prompt_cache_key``, else ``user``, else
``metadata.user_id``, else a hash of the conversation's opening (system prompt or
instructions and the turns up to the first user turn), which every later turn repeats. Sans-I/O:
clock and randomness are passed in, so tests drive it with plain values.
"""

from __future__ import annotations

import collections
import hashlib
import math
import random
import time
from typing import Callable

import attrs
import orjson

from gatewayd.config import Model, ModelRoute, RoutingSettings
from gatewayd import protocols

RECENT_ERRORS = 5
OPENING_TURNS = 4  # at most this many leading turns make a conversation's opening


@attrs.define
class Health:
    """What this process has seen of one route."""

    consecutive_failures: int = 0
    cooled_until: float = 0.0  # monotonic; 0 = not cooling
    cooldowns: int = 0  # cool-downs in a row (each twice the last)
    retry_after_until: float = 0.0  # the part of the cool-down the provider asked for
    probing: bool = False  # a half-open probe is in flight
    requests: int = 0
    failures: int = 0
    latency_ms: float | None = None  # moving average of the time to the first byte (stream: event; else status line)
    last_error: str | None = None
    misconfigured: str | None = None  # the provider refused the gateway's credentials (401/403): why
    recent_errors: collections.deque = attrs.Factory(lambda: collections.deque(maxlen=RECENT_ERRORS))

    def state(self, now: float) -> str:
        if self.misconfigured is not None:
            return "misconfigured"
        if self.probing:
            return "probing"
        if self.cooled_until > now:
            return "cooling"
        if self.cooled_until:
            return "ready_to_probe"
        return "healthy"


def sticky_key(client_format: str, body: dict) -> str | None:
    """What ties the turns of one conversation together, or None when nothing does."""
    for name in ("prompt_cache_key", "user"):
        value = body.get(name)
        if isinstance(value, str) and value:
            return f"{name}:{value}"
    metadata = body.get("metadata")
    if isinstance(metadata, dict):
        value = metadata.get("user_id")
        if isinstance(value, str) and value:
            return f"user_id:{value}"
    turns = body.get("messages") if client_format not in ("responses", "compact") else body.get("input")
    opening = [body.get("system"), body.get("instructions")]
    if isinstance(turns, list):
        for turn in turns[:OPENING_TURNS]:  # system/developer turns, then the first user turn
            opening.append(turn)
            if isinstance(turn, dict) and turn.get("role") == "user":
                break
    elif isinstance(turns, str):
        opening.append(turns)
    if not any(part is not None for part in opening):
        return None
    try:
        blob = orjson.dumps(opening)
    except TypeError:
        return None
    return "prefix:" + hashlib.blake2b(blob, digest_size=12).hexdigest()


class Router:
    def __init__(self, settings: RoutingSettings, *, clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None) -> None:
        self.settings = settings
        self.clock = clock
        self.rng = rng or random.Random()
        self.health: dict[str, Health] = {}
        # told when a route cools down (down) or answers again (up): metrics, logs
        self.on_change: Callable[[ModelRoute, bool, str], None] | None = None
        # passive provider health (down when it cannot be reached, up when it answers):
        # told (name, up, what it was before or None, reason) on each change
        self.provider_up: dict[str, bool] = {}
        self.on_provider_change: Callable[[str, bool, bool | None, str], None] | None = None
        # told (route, reason) when a route's provider starts refusing the gateway's credentials
        self.on_misconfigured: Callable[[ModelRoute, str], None] | None = None
        self._sticky: collections.OrderedDict[tuple[str, str], tuple[str, float]] = collections.OrderedDict()

    def _health(self, route: ModelRoute) -> Health:
        health = self.health.get(route.name)
        if health is None:
            health = self.health[route.name] = Health()
        return health

    def _available(self, route: ModelRoute, now: float) -> bool:
        health = self.health.get(route.name)
        if health is None:
            return True
        return not health.probing and health.cooled_until <= now

    # -- choosing --------------------------------------------------------------------

    def plan(self, model: Model, client_format: str, key: str | None = None) -> list[ModelRoute]:
        """The routes of ``model`` that can serve ``client_format``, in the order to try them."""
        serving = [r for r in model.routes if r.usable and protocols.serves(r, client_format)]
        if len(serving) < 2:
            return serving
        now = self.clock()
        available = [r for r in serving if self._available(r, now)]
        order: list[ModelRoute] = []
        sticky = self._sticky_route(model.id, key, now) if key else None
        if sticky is not None:
            order.extend(r for r in available if r.name == sticky)
        rest = [r for r in available if r not in order]
        for priority in sorted({r.priority for r in rest}, reverse=True):
            group = [r for r in rest if r.priority == priority]
            order.extend(_by_key(group, model.id, key) if key else self._by_weight(group))
        cooling = [r for r in serving if r not in order]
        cooling.sort(key=lambda r: self._health(r).cooled_until)
        return order + cooling

    def _by_weight(self, routes: list[ModelRoute]) -> list[ModelRoute]:
        """A random order in which each next route is drawn with probability proportional to its weight."""
        routes = list(routes)
        out = []
        while routes:
            total = sum(r.weight for r in routes)
            pick = self.rng.uniform(0, total)
            for i, route in enumerate(routes):
                pick -= route.weight
                if pick <= 0 or i == len(routes) - 1:
                    out.append(routes.pop(i))
                    break
        return out

    def _sticky_route(self, model_id: str, key: str, now: float) -> str | None:
        entry = self._sticky.get((model_id, key))
        if entry is None:
            return None
        name, expires = entry
        if expires <= now:
            del self._sticky[(model_id, key)]
            return None
        return name

    def remember(self, model: Model, key: str | None, route: ModelRoute) -> None:
        """The route that served this conversation's turn: its next turn goes there first."""
        if key is None or len(model.routes) < 2:
            return
        entry = (model.id, key)
        self._sticky[entry] = (route.name, self.clock() + self.settings.sticky_ttl_s)
        self._sticky.move_to_end(entry)
        while len(self._sticky) > self.settings.sticky_max:
            self._sticky.popitem(last=False)

    # -- outcomes --------------------------------------------------------------------

    def started(self, route: ModelRoute) -> None:
        """An attempt on ``route`` begins; a route whose cool-down is over is probed by it."""
        health = self._health(route)
        health.requests += 1
        if health.cooled_until and health.cooled_until <= self.clock():
            health.probing = True

    def succeeded(self, route: ModelRoute, first_byte_s: float | None = None) -> None:
        """The provider answered (including a 4xx that is the client's error): it is reachable."""
        health = self._health(route)
        if (health.cooled_until or health.misconfigured) and self.on_change is not None:
            self.on_change(route, True, "answered again")
        health.misconfigured = None
        health.consecutive_failures = 0
        health.cooldowns = 0
        health.cooled_until = 0.0
        health.retry_after_until = 0.0
        health.probing = False
        if first_byte_s is not None:
            ms = first_byte_s * 1000
            health.latency_ms = ms if health.latency_ms is None else 0.8 * health.latency_ms + 0.2 * ms
        return None

    def abandoned(self, route: ModelRoute) -> None:
        """The attempt ended without telling anything about the route (the client left)."""
        self._health(route).probing = False

    def failed(self, route: ModelRoute, reason: str, retry_after_s: float | None = None, *,
               cool_now: bool = False) -> None:
        """A connect failure, a timeout, a 429 or 5xx, an invalid or broken answer (``cool_now``:
        one failure is enough to cool the route)."""
        now = self.clock()
        health = self._health(route)
        health.failures += 1
        health.consecutive_failures += 1
        health.last_error = reason
        health.recent_errors.append((time.time(), reason))
        s = self.settings
        was_cooling = health.cooled_until > now
        if health.probing or cool_now or health.consecutive_failures >= s.failures_to_cool:
            length = min(s.cooldown_s * (2 ** health.cooldowns), s.max_cooldown_s)
            health.cooldowns += 1
            health.cooled_until = max(health.cooled_until, now + length)
        if retry_after_s is not None and retry_after_s > 0:
            until = now + min(retry_after_s, s.max_cooldown_s)
            health.retry_after_until = until
            health.cooled_until = max(health.cooled_until, until)
        health.probing = False
        if health.cooled_until > now and not was_cooling and self.on_change is not None:
            self.on_change(route, False, f"{reason}; cooling down for {health.cooled_until - now:.0f} s")

    def misconfigured(self, route: ModelRoute, reason: str) -> None:
        """The provider refused the gateway's credentials (401/403): a mistake of the operator's
        (a wrong or revoked key, a model not enabled for the provider account), not of the
        request. The route cools down at once, as after ``failures_to_cool`` failures, and
        reads as misconfigured until it answers again (a probe, after the cool-down)."""
        health = self._health(route)
        was = health.misconfigured
        health.misconfigured = reason
        self.failed(route, reason, cool_now=True)
        if was is None and self.on_misconfigured is not None:
            self.on_misconfigured(route, reason)

    def provider_seen(self, name: str, up: bool, reason: str = "") -> None:
        """A provider answered (``up``) or could not be reached: its health, per provider
        rather than per route (one provider serves many routes)."""
        before = self.provider_up.get(name)
        if before == up:
            return
        self.provider_up[name] = up
        if self.on_provider_change is not None:
            self.on_provider_change(name, up, before, reason)

    # -- reporting -------------------------------------------------------------------

    def report(self, models: dict[str, Model]) -> list[dict]:
        """Every route of every model with its state: what ``gatewayctl routes`` shows."""
        now = self.clock()
        out = []
        for model in models.values():
            for route in model.routes:
                health = self.health.get(route.name) or Health()
                out.append({
                    "model": model.id,
                    "route": route.name,
                    "provider": route.provider.name,
                    "protocol": route.provider.protocol,
                    "upstream_id": route.upstream_id,
                    "priority": route.priority,
                    "weight": route.weight,
                    "state": health.state(now),
                    "cooling_for_s": round(max(0.0, health.cooled_until - now), 1),
                    "consecutive_failures": health.consecutive_failures,
                    "requests": health.requests,
                    "failures": health.failures,
                    "latency_ms": round(health.latency_ms, 1) if health.latency_ms is not None else None,
                    "last_error": health.last_error,
                    "misconfigured": health.misconfigured,
                    "recent_errors": [
                        {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)), "error": text}
                        for at, text in health.recent_errors
                    ],
                })
        return out


def _by_key(routes: list[ModelRoute], model_id: str, key: str) -> list[ModelRoute]:
    """The order weighted rendezvous hashing gives ``key``: each route scores
    ``weight / -ln(u)`` with ``u`` a hash of (model, key, route) in (0, 1), highest first.
    Over many keys each route leads in proportion to its weight, as with the random draw;
    for one key the order is the same in every gatewayd process, so a conversation's first
    turn goes to the same provider whichever instance or worker takes it, and only the
    conversations of a route that leaves move."""

    def score(route: ModelRoute) -> float:
        digest = hashlib.blake2b(f"{model_id}\0{key}\0{route.name}".encode(), digest_size=8).digest()
        u = (int.from_bytes(digest, "big") + 1) / (2 ** 64 + 2)
        return route.weight / -math.log(u)

    return sorted(routes, key=score, reverse=True)
