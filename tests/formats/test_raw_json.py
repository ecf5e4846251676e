"""The model id is mapped in the body's bytes; every other byte stays as the client sent it."""

from __future__ import annotations

import json

import orjson
from hypothesis import given, settings, strategies as st

from gatewayd.formats.raw_json import replace_top_level_string


def test_only_the_value_changes():
    raw = b'{ "model" : "claude-3-5-haiku",\n "x": 2.50, "t": "caf\\u00e9", "model_note": "model"}'
    assert replace_top_level_string(raw, "model", "claude-3-5-haiku-latest") == (
        b'{ "model" : "claude-3-5-haiku-latest",\n "x": 2.50, "t": "caf\\u00e9", "model_note": "model"}')


def test_nested_model_keys_and_look_alike_strings_are_left_alone():
    raw = (b'{"messages":[{"role":"user","content":"\\"model\\": \\"x\\"","model":"inner"}],'
           b'"metadata":{"model":"inner"},"model":"outer"}')
    out = replace_top_level_string(raw, "model", "new")
    assert out == raw.replace(b'"model":"outer"', b'"model":"new"')


def test_escaped_key_and_duplicate_keys_match_like_a_parser():
    raw = b'{"mod\\u0065l":"a","model":"b"}'
    assert replace_top_level_string(raw, "model", "z") == b'{"mod\\u0065l":"z","model":"z"}'


def test_values_that_need_escaping_are_encoded():
    assert orjson.loads(replace_top_level_string(b'{"model":"a"}', "model", 'we"ird\\')) == {"model": 'we"ird\\'}


def test_none_when_there_is_nothing_to_replace():
    assert replace_top_level_string(b'{"other":"a"}', "model", "z") is None
    assert replace_top_level_string(b'{"model":7}', "model", "z") is None
    assert replace_top_level_string(b'[{"model":"a"}]', "model", "z") is None
    assert replace_top_level_string(b'', "model", "z") is None


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["model", "a", "m\"o", "b"]),
                                                                  inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(doc=st.dictionaries(st.sampled_from(["model", "messages", "x", "y\\"]), _json, max_size=5),
       model=st.text(), new=st.text(), ascii_only=st.booleans(), indent=st.sampled_from([None, 1]))
def test_same_document_as_re_encoding_but_the_other_bytes_kept(doc, model, new, ascii_only, indent):
    doc = {**doc, "model": model}
    raw = json.dumps(doc, ensure_ascii=ascii_only, indent=indent).encode()
    out = replace_top_level_string(raw, "model", new)
    assert json.loads(out) == {**doc, "model": new}  # json, not orjson: big ints stay ints
    prefix = raw[: raw.index(b'"model"')]
    assert out.startswith(prefix)


def test_fast_path_on_a_large_body_keeps_every_other_byte():
    big = "lorem ipsum \"model\": \\\"x\\\" " * 40000  # over a megabyte, look-alikes included
    raw = orjson.dumps({"messages": [{"role": "user", "content": big}], "model": "claude-3-5-haiku", "x": 2})
    raw = raw.replace(b'"x":2', b'"x": 2.50')  # bytes a re-encoding would change
    out = replace_top_level_string(raw, "model", "claude-3-5-haiku-latest", orjson.loads(raw))
    assert out == raw.replace(b'"model":"claude-3-5-haiku"', b'"model":"claude-3-5-haiku-latest"')


def test_large_body_the_fast_path_cannot_settle_is_left_to_re_encoding():
    big = "y" * (64 * 1024)
    nested = orjson.dumps({"tools": [{"parameters": {"model": "inner"}}], "model": "a", "pad": big})
    escaped = b'{"model":"a","text":"caf\\u00e9","pad":"' + big.encode() + b'"}'
    for raw in (nested, escaped):
        assert replace_top_level_string(raw, "model", "z", orjson.loads(raw)) is None
    small = orjson.dumps({"tools": [{"parameters": {"model": "inner"}}], "model": "a"})
    assert orjson.loads(replace_top_level_string(small, "model", "z", orjson.loads(small))) == {
        "tools": [{"parameters": {"model": "inner"}}], "model": "z"}  # small: the scanner settles it


@settings(max_examples=300, deadline=None)
@given(doc=st.dictionaries(st.sampled_from(["model", "messages", "x", "y\\"]), _json, max_size=5),
       model=st.text(), new=st.text(), ascii_only=st.booleans(), indent=st.sampled_from([None, 1]))
def test_fast_path_gives_the_same_document(doc, model, new, ascii_only, indent):
    doc = {**doc, "model": model}
    raw = json.dumps(doc, ensure_ascii=ascii_only, indent=indent).encode()
    out = replace_top_level_string(raw, "model", new, json.loads(raw))
    assert json.loads(out) == {**doc, "model": new}
    assert out.startswith(raw[: raw.index(b'"model"')])


def test_a_body_nested_deeper_than_orjson_encodes_is_no_crash_of_the_duplicate_check():
    """orjson parses 1,024 levels but encodes 254: the check takes its slow path (the fuzz test
    of tests/test_fuzz_bodies.py found the TypeError)."""
    import json

    from gatewayd.formats.raw_json import duplicate_key

    deep: object = 1
    for _ in range(300):
        deep = [deep]
    raw = json.dumps({"model": "m", "tools": deep}).encode()
    assert duplicate_key(raw, orjson.loads(raw)) is None
