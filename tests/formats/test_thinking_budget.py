"""Property test (issue 36): a thinking budget never reaches or passes the cap, on any route
to Anthropic's Messages API.

Anthropic refuses ``budget_tokens >= max_tokens`` (and a budget under 1024). The gateway sets
both numbers when it translates an effort (chat ``reasoning_effort``, responses
``reasoning.effort``, Gemini ``thinkingConfig``) and lowers a messages client's cap to the
model's maximum; every one of those, for every effort, client cap, default cap and model
maximum, gives a pair Anthropic takes, and a higher effort never thinks less than a lower one
under the same cap. Pure functions: no gateway, no provider.
"""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from gatewayd.billing.features import messages_changes
from gatewayd.catalogue import Model
from gatewayd.formats.chat_request import REASONING_EFFORTS
from gatewayd.formats.chat_to_messages import chat_request_to_messages
from gatewayd.formats.gemini_request_to_chat import gemini_request_to_chat
from gatewayd.formats.responses_request import responses_request_to_chat
from gatewayd.formats.thinking import MIN_BUDGET_TOKENS, fit_budget
from gatewayd.sim.anthropic import validate

caps = st.one_of(st.none(), st.integers(1, 200_000))
model_maxima = st.integers(1, 128_000)
defaults = st.integers(1, 64_000)


def to_messages(chat: dict, *, default: int, model_max: int) -> dict:
    return chat_request_to_messages(chat, upstream_model="claude-up", default_max_tokens=min(default, model_max),
                                    max_output_tokens=model_max)


def assert_valid(out: dict, model_max: int) -> int | None:
    """The pair Anthropic takes (the simulator checks as Anthropic does); the budget, if any."""
    assert validate(out) is None, (out.get("thinking"), out["max_tokens"])
    assert out["max_tokens"] <= model_max
    thinking = out.get("thinking")
    if thinking is None:
        return None
    assert MIN_BUDGET_TOKENS <= thinking["budget_tokens"] < out["max_tokens"]
    return int(thinking["budget_tokens"])


@settings(max_examples=400, deadline=None)
@given(cap=caps, default=defaults, model_max=model_maxima)
def test_chat_effort_fits_the_cap_and_grows_with_the_effort(cap, default, model_max):
    budgets = []
    for effort in REASONING_EFFORTS:
        chat = {"messages": [{"role": "user", "content": "q"}], "reasoning_effort": effort}
        if cap is not None:
            chat["max_completion_tokens"] = cap
        out = to_messages(chat, default=default, model_max=model_max)
        budget = assert_valid(out, model_max)
        if effort == "none":
            assert budget is None
        elif model_max > MIN_BUDGET_TOKENS:
            assert budget is not None, (effort, cap, model_max)  # the cap is raised to make room
            budgets.append(budget)
    assert budgets == sorted(budgets)


@settings(max_examples=200, deadline=None)
@given(cap=caps, model_max=model_maxima, effort=st.sampled_from(REASONING_EFFORTS))
def test_responses_effort_fits_the_cap(cap, model_max, effort):
    body = {"model": "m", "input": "q", "reasoning": {"effort": effort}}
    if cap is not None:
        body["max_output_tokens"] = cap
    assert_valid(to_messages(responses_request_to_chat(body), default=8192, model_max=model_max), model_max)


@settings(max_examples=200, deadline=None)
@given(cap=caps, model_max=model_maxima, budget=st.integers(-1, 100_000))
def test_gemini_thinking_config_fits_the_cap(cap, model_max, budget):
    config: dict = {"thinkingConfig": {"thinkingBudget": budget, "includeThoughts": True}}
    if cap is not None:
        config["maxOutputTokens"] = cap
    chat = gemini_request_to_chat({"contents": [{"role": "user", "parts": [{"text": "q"}]}],
                                   "generationConfig": config}, model="claude", stream=False).body
    assert_valid(to_messages(chat, default=8192, model_max=model_max), model_max)


@settings(max_examples=300, deadline=None)
@given(model_max=st.integers(MIN_BUDGET_TOKENS + 1, 128_000), cap=st.integers(1026, 300_000), data=st.data())
def test_a_messages_cap_lowered_to_the_model_maximum_lowers_the_budget_with_it(model_max, cap, data):
    """A messages client's own pair was valid; the gateway's lowering of the cap keeps it so."""
    budget = data.draw(st.integers(MIN_BUDGET_TOKENS, cap - 1))
    body = {"model": "m", "max_tokens": cap, "messages": [{"role": "user", "content": "q"}],
            "thinking": {"type": "enabled", "budget_tokens": budget}}
    model = Model(id="m", routes=(), kind="chat", family="claude", input_price=1, output_price=1,
                  cached_input_price=None, cache_write_price=None, max_output_tokens=model_max, rate_limit=None)
    out = {**body, **messages_changes(body, model)}
    assert_valid(out, model_max)
    if cap <= model_max:
        assert out == body  # nothing the client sent is changed when the gateway lowers nothing


@given(wanted=st.integers(MIN_BUDGET_TOKENS, 200_000), more=st.integers(0, 100_000), cap=st.integers(1, 200_000))
def test_fit_budget_is_below_the_cap_and_monotone(wanted, more, cap):
    fitted, fitted_more = fit_budget(wanted, cap), fit_budget(wanted + more, cap)
    if cap <= MIN_BUDGET_TOKENS:
        assert fitted is None and fitted_more is None
        return
    assert fitted is not None and fitted_more is not None
    assert MIN_BUDGET_TOKENS <= fitted <= fitted_more < cap
