"""``[[sim:fault=status:S]] [[sim:fault=operator_ids]]``: an error in the vendor's real wording,
naming the caller's organization, project or key (fake ones), for the gateway's tests that
such identifiers never reach its clients (gatewayd.provider_identifiers)."""

from __future__ import annotations

SIM_ORGANIZATION = "org-SimOperator0rg42"
SIM_PROJECT = "proj_SimOperatorProj42"
SIM_KEY_HINT = "sk-proj-********************************************k42x"
SIM_ANTHROPIC_ORGANIZATION = "5e1f0c2a-7d3b-4e8f-9a61-0b2c3d4e5f60"
SIM_GOOGLE_PROJECT = "424242424242"


def operator_id_message(vendor: str, status: int) -> str:
    """The message a vendor sends for ``status`` that names the caller's organization or key."""
    if vendor == "anthropic":
        if status == 429:
            return (f"This request would exceed the rate limit for your organization ({SIM_ANTHROPIC_ORGANIZATION}) "
                    "of 50,000 input tokens per minute. For details, refer to: "
                    "https://docs.anthropic.com/en/api/rate-limits.")
        return f"organization: {SIM_ANTHROPIC_ORGANIZATION} is disabled (simulated error {status})"
    if vendor == "google":
        return (f"Quota exceeded for quota metric 'Generate Content API requests per minute' of service "
                f"'generativelanguage.googleapis.com' for consumer 'project_number:{SIM_GOOGLE_PROJECT}'.")
    if status == 401:
        return (f"Incorrect API key provided: {SIM_KEY_HINT}. You can find your API key at "
                "https://platform.openai.com/account/api-keys.")
    if status == 403:
        return f"Project `{SIM_PROJECT}` does not have access to model `gpt-4o`"
    return (f"Rate limit reached for gpt-4o in organization {SIM_ORGANIZATION} on tokens per min (TPM): "
            "Limit 30000, Used 27000, Requested 5000. Please try again in 4.2s.")
