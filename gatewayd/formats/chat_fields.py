"""Readers of chat-format request fields that every chat -> X translator needs alike.

One place for what a text part, a base64 data URL and ``stop`` must look like, so the
messages and Gemini translators refuse the same bad input with the same words.
"""

from __future__ import annotations

import binascii
import re
from typing import Any

from gatewayd.formats.errors import TranslationError

DATA_URL = re.compile(r"^data:(?P<media_type>[\w.+-]+/[\w.+-]+)(?P<params>(?:;[^,;]*)*?);base64,(?P<data>.*)$", re.S)


def text_part(part: Any, where: str) -> str:
    if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
        raise TranslationError(f"{where} must be a text part: {{\"type\": \"text\", \"text\": ...}}", where)
    text: str = part["text"]
    return text


def parse_data_url(url: str, where: str) -> tuple[str, str]:
    """``data:<media type>;base64,<data>`` -> (media type, base64 data)."""
    match = DATA_URL.match(url)
    if match is None or not match["data"]:
        raise TranslationError("data URLs must look like data:<media type>;base64,<data>", where)
    return match["media_type"].lower(), match["data"]


def stop_sequences(stop: Any) -> list[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop] if stop else []
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return [s for s in stop if s]
    raise TranslationError("stop must be a string or an array of strings", "stop")


_URL_SAFE_TO_STANDARD = str.maketrans("-_", "+/")


def standard_base64(data: str, where: str) -> str:
    """``data`` in the standard base64 alphabet, padded: Google's JSON parser takes bytes in
    either alphabet and google-genai sends the URL-safe one (``-``, ``_``, no padding needed),
    which Anthropic and OpenAI refuse ("invalid base64 data"). Data that is base64 in neither
    alphabet is the client's 400, naming ``where``, not the provider's."""
    standard = data.translate(_URL_SAFE_TO_STANDARD) if ("-" in data or "_" in data) else data
    standard += "=" * (-len(standard) % 4) if not standard.endswith("=") else ""
    try:
        binascii.a2b_base64(standard, strict_mode=True)
    except binascii.Error:
        raise TranslationError(f"{where} is not valid base64 data", where) from None
    return standard
