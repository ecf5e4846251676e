"""Text log lines cannot be forged through a value that comes from a client."""

from __future__ import annotations

import logging

from gatewayd.logs import JsonFormatter, TextFormatter, text_value


def line(msg: str, **fields) -> str:
    record = logging.LogRecord("gatewayd.request", logging.INFO, "x.py", 1, msg, None, None)
    record.fields = fields
    return TextFormatter().format(record)


def test_a_newline_in_a_field_value_cannot_start_a_second_line():
    forged = "/v1/x\n2026-01-01T00:00:00.000Z ERROR   request status=500"
    text = line("request", path=forged, status=404)
    assert text.splitlines() == [text]
    assert text.endswith(' path="/v1/x\\n2026-01-01T00:00:00.000Z ERROR   request status=500" status=404')


def test_a_space_or_equals_in_a_value_cannot_pass_as_another_field():
    text = line("request", path="/v1/x status=200", key_id="k1")
    assert text.endswith(' path="/v1/x status=200" key_id=k1')


def test_every_line_breaking_or_terminal_character_is_escaped():
    for char, shown in [("\r", "\\r"), ("\t", "\\t"), ("\x00", "\\x00"), ("\x1b", "\\x1b"), ("\x85", "\\x85"),
                        ("\u2028", "\\u2028"), ("\u2029", "\\u2029"), ("\x0b", "\\x0b"), ("\x0c", "\\x0c")]:
        text = line(f"msg{char}", value=f"a{char}b")
        assert text.splitlines() == [text] and shown in text and char not in text, repr(char)


def test_plain_values_are_unchanged_and_quoting_is_reversible():
    assert text_value("/v1/chat/completions") == "/v1/chat/completions"
    assert text_value(200) == "200" and text_value(True) == "True"
    assert text_value('say "hi" \\ bye') == '"say \\"hi\\" \\\\ bye"'
    assert text_value("") == '""'


def test_json_lines_were_already_safe():
    record = logging.LogRecord("gatewayd.request", logging.INFO, "x.py", 1, "request", None, None)
    record.fields = {"path": "/a\nb"}
    out = JsonFormatter().format(record)
    assert out.splitlines() == [out] and '"path":"/a\\nb"' in out
