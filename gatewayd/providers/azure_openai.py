"""Azure OpenAI: the OpenAI protocol under Azure's addressing.

Chat completions and embeddings go to ``{base_url}/deployments/{upstream_id}/{operation}``
(the route's ``upstream_id`` is the Azure deployment name); the Responses API has no
deployment path and goes to ``{base_url}/responses`` with the deployment named in the
body's ``model``, as the official ``AzureOpenAI`` client sends it (openai-python's
``lib/azure.py`` rewrites only chat, completions, embeddings, audio and images to
``/deployments/{model}``). Every request carries ``?api-version={api_version}`` and the
key in the ``api-key`` header. Bodies and answers pass through as for OpenAI.

The ``api-version`` is the provider's ``api_version`` key in the config file, required
(declared and checked in ``gatewayd.protocols``, which the config loader reads).
"""

from __future__ import annotations

from urllib.parse import quote

import httpx

from gatewayd.catalogue import ModelRoute
from gatewayd.providers import openai

_DEPLOYMENT_OPERATIONS = frozenset({"chat/completions", "embeddings"})

def url(target: ModelRoute, operation: str) -> str:
    base = target.provider.base_url
    version = quote(target.provider.settings["api_version"], safe="")
    if operation in _DEPLOYMENT_OPERATIONS:
        return f"{base}/deployments/{quote(target.upstream_id, safe='')}/{operation}?api-version={version}"
    return f"{base}/{operation}?api-version={version}"


def request(upstream, target: ModelRoute, operation: str, body: bytes, *, stream: bool) -> httpx.Request:
    headers = {"content-type": "application/json", "accept": "text/event-stream" if stream else "application/json"}
    if target.provider.api_key:
        headers["api-key"] = target.provider.api_key
    return upstream.post(url(target, operation), body, headers, stream=stream)


ROUTES = openai.routes(request)
COMPACT = openai.compact_route(request)
