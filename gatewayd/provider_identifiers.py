"""The operator's identifiers, removed from provider error messages before a client sees them.

A provider's error names the account the gateway calls it with: OpenAI's "Rate limit
reached for gpt-4o in organization org-... on tokens per min", "Incorrect API key
provided: sk-proj-****...abcd", "Project `proj_...` does not have access to model";
Anthropic's "rate limit for your organization (<uuid>) of 50,000 input tokens per minute"
and "(org: <uuid>, model: ...)"; Google's "consumer 'project_number:123...'" and an API key
(``AIza...``). Passed on verbatim they tell every tenant the operator's organization, project
and key fragment. Each is replaced by ``[redacted]``; the rest of the message (what went
wrong, the limit, when to retry) is kept, since clients act on it.

Applied to the error body's bytes (the identifiers are plain ASCII, so they read the same
inside a JSON string and the replacement keeps the JSON valid): a body without one comes
back as the very same bytes. The provider's own wording stays in the operator's log.
"""

from __future__ import annotations

import re

REDACTED = b"[redacted]"

_UUID = rb"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"

# (pattern, replacement): the identifier itself, or the identifier after the words that name it
_RULES = (
    (re.compile(rb"\borg-[A-Za-z0-9]{6,}"), REDACTED),  # OpenAI organization ids
    (re.compile(rb"\bproj_[A-Za-z0-9]{6,}"), REDACTED),  # OpenAI project ids
    (re.compile(rb"\buser-[A-Za-z0-9]{12,}"), REDACTED),  # OpenAI user ids
    (re.compile(rb"\bsk-[A-Za-z0-9_\-*]+(?:\.\.\.[A-Za-z0-9_\-*]+)?"), REDACTED),  # OpenAI / Anthropic keys, masked or not
    (re.compile(rb"\bAIza[0-9A-Za-z_\-]{10,}"), REDACTED),  # Google API keys
    (re.compile(rb"(Incorrect API key provided: )[^\s\"\\,.]+(?:\.\.\.[^\s\"\\,.]+)?"), rb"\1" + REDACTED),
    (re.compile(rb"(organization \(|organization: |org: |organization_id: )" + _UUID), rb"\1" + REDACTED),
    (re.compile(rb"(project_number:|projects/|api_key:)[0-9A-Za-z_\-]+"), rb"\1" + REDACTED),
)
_ANY = re.compile(rb"org-|proj_|user-|sk-|AIza|API key provided|organization|org: |project_number|projects/|api_key:")


def scrub_provider_identifiers(body: bytes) -> bytes:
    """``body`` with the operator's identifiers replaced; the same object when it holds none."""
    if not _ANY.search(body):
        return body
    for pattern, replacement in _RULES:
        body = pattern.sub(replacement, body)
    return body
