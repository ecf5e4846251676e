"""The SSE splitter: every way a stream can be cut into chunks yields the same events, and the
"\\n"-only fast path reads events exactly as the general parser does."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from gatewayd.formats.sse import SSESplitter, parse_fields

STREAMS = [
    b'data: {"a":1}\n\ndata: {"b":2}\n\ndata: [DONE]\n\n',
    b'event: message_start\ndata: {"type":"message_start"}\n\nevent: ping\ndata: {}\n\n',
    b': keep-alive comment\n\ndata: {"x":"y"}\n\n',
    b'data: line one\ndata: line two\n\n',  # two data lines join with "\n"
    b'data:no-space\n\ndata:  two spaces keep one\n\n',
    b'data: \n\nevent: only-event\n\n',  # empty data: skipped; an event name alone is an event
    b'data: {"a":1}\r\n\r\ndata: {"b":2}\r\n\r\n',  # CRLF
    b'data: {"a":1}\r\rdata: {"b":2}\r\r',  # CR
    b'data: {"a":"\xe2\x82\xac"}\n\n' * 40,  # many events in one chunk, non-ASCII
]


def events(splitter: SSESplitter, pieces) -> list[tuple[bytes, str | None, bytes]]:
    out = []
    for piece in pieces:
        out += [(e.raw, e.event, e.data) for e in splitter.feed(piece)]
    out += [(e.raw, e.event, e.data) for e in splitter.flush()]
    return out


def reference(stream: bytes) -> list[tuple[bytes, str | None, bytes]]:
    """The general parser over a stream split at its terminators by hand."""
    out = []
    normal = stream.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    for block in normal.split(b"\n\n"):
        if not block:
            continue
        event, data = parse_fields(block)
        if event is None and not data:
            continue
        out.append((event, data))
    return out


@pytest.mark.parametrize("stream", STREAMS)
def test_whole_and_byte_by_byte_and_random_cuts_agree(stream):
    whole = events(SSESplitter(), [stream])
    assert [(e, d) for _, e, d in whole] == reference(stream)
    assert b"".join(raw for raw, _, _ in whole if raw) in (stream, stream.replace(b": keep-alive comment\n\n", b"")
                                                           .replace(b"data: \n\n", b""))
    assert events(SSESplitter(), [stream[i:i + 1] for i in range(len(stream))]) == whole
    rng = random.Random(len(stream))
    for _ in range(20):
        cuts = sorted(rng.sample(range(1, len(stream)), min(5, len(stream) - 1)))
        pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)])]
        assert events(SSESplitter(), pieces) == whole


def test_one_data_line_fast_path_matches_the_general_parser():
    for raw in (b'data: {"a":1}\n\n', b"data: \n\n", b"data:  x\n\n", b'data: {"a":"b: c"}\n\n'):
        [event] = SSESplitter().feed(raw) or [None]
        if event is None:
            assert parse_fields(raw) == (None, b"")
        else:
            assert (event.event, event.data) == parse_fields(raw)


def test_a_cr_arriving_later_switches_to_the_general_search():
    splitter = SSESplitter()
    assert [e.data for e in splitter.feed(b'data: {"a":1}\n\ndata: {"b"')] == [b'{"a":1}']
    assert [e.data for e in splitter.feed(b':2}\r\n\r\n')] == [b'{"b":2}']
    assert splitter.pending == 0


# -- mixed terminators: the earliest blank line wins, whatever kind was seen last ----------------


def split(data: bytes, sizes=None) -> list[tuple[str | None, bytes, bytes]]:
    splitter = SSESplitter()
    events = []
    if sizes is None:
        events += splitter.feed(data)
    else:
        at = 0
        for size in sizes:
            events += splitter.feed(data[at : at + size])
            at += size
        events += splitter.feed(data[at:])
    events += splitter.flush()
    return [(e.event, e.data, e.raw) for e in events]


@pytest.mark.parametrize("sep", [b"\n\n", b"\r\n\r\n", b"\r\r"])
def test_each_separator(sep):
    nl = sep[: len(sep) // 2]
    data = b"event: a" + nl + b"data: 1" + sep + b"data: 2" + sep
    assert [(e, d) for e, d, _ in split(data)] == [("a", b"1"), (None, b"2")]


def test_mixed_separators_cut_at_the_earliest_blank_line():
    data = b"data: 1\r\n\r\ndata: 2\n\ndata: 3\r\rdata: 4\r\n\r\ndata: 5\n\n"
    assert [d for _, d, _ in split(data)] == [b"1", b"2", b"3", b"4", b"5"]
    # a later separator of the kind seen last must not win over an earlier one of another kind
    data = b"data: a\r\n\r\ndata: b\n\ndata: c\r\n\r\n"
    assert [d for _, d, _ in split(data)] == [b"a", b"b", b"c"]


_event = st.builds(lambda text, sep: b"data: " + text.encode() + sep,
                   st.text("abc xyz{}:\"", min_size=1, max_size=20).filter(lambda t: t.strip()),
                   st.sampled_from([b"\n\n", b"\r\n\r\n", b"\r\r"]))


@settings(max_examples=200, deadline=None)
@given(st.lists(_event, min_size=1, max_size=20), st.lists(st.integers(1, 40), max_size=30))
def test_any_read_sizes_give_the_same_events(events, sizes):
    data = b"".join(events)
    whole = split(data)
    assert split(data, sizes) == whole
    assert b"".join(raw for _, _, raw in whole) == data
    assert len(whole) == len(events)
