"""Responses format for upstreams that speak only chat: the three translations in one place.

For the GPT-like family the gateway passes ``POST /v1/responses`` through untouched. For
every other family it translates the request to chat (:func:`responses_request_to_chat`),
and the chat answer back, whole (:func:`chat_response_to_responses`) or as a stream
(:class:`ChatToResponsesStream`). Messages-format upstreams add one more hop, chat <->
messages, done elsewhere; the two compose because both sides meet in plain chat dicts.
"""

from __future__ import annotations

from gatewayd.formats.responses_output import chat_response_to_responses, usage_from_chat
from gatewayd.formats.responses_request import responses_request_to_chat
from gatewayd.formats.responses_stream import ChatToResponsesStream

__all__ = [
    "ChatToResponsesStream",
    "chat_response_to_responses",
    "responses_request_to_chat",
    "usage_from_chat",
]
