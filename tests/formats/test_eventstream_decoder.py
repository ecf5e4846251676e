"""Our event-stream decoder against botocore's, the oracle: random frames (every header type
AWS defines, random payloads), split at random points, decode to what botocore decodes; a
corrupted byte is refused by both."""

from __future__ import annotations

import struct
import zlib

import pytest
from botocore.eventstream import EventStreamBuffer, ParserError
from hypothesis import given, settings, strategies as st

from gatewayd.formats.eventstream import FrameDecoder, FrameError, encode_frame

# (type, strategy of its value) for the ten header types of the format
_STR = st.text(max_size=40)
_VALUES = st.one_of(
    st.tuples(st.just(0), st.none()),
    st.tuples(st.just(1), st.none()),
    st.tuples(st.just(2), st.integers(-128, 127)),
    st.tuples(st.just(3), st.integers(-(2**15), 2**15 - 1)),
    st.tuples(st.just(4), st.integers(-(2**31), 2**31 - 1)),
    st.tuples(st.just(5), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just(6), st.binary(max_size=40)),
    st.tuples(st.just(7), _STR),
    st.tuples(st.just(8), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just(9), st.binary(min_size=16, max_size=16)),
)
_FORMATS = {2: "!b", 3: "!h", 4: "!i", 5: "!q", 8: "!q"}


def _header(name: str, kind: int, value) -> bytes:
    raw_name = name.encode()
    out = struct.pack("!B", len(raw_name)) + raw_name + struct.pack("!B", kind)
    if kind in (0, 1):
        return out
    if kind in (6, 7):
        raw = value.encode() if kind == 7 else value
        return out + struct.pack("!H", len(raw)) + raw
    if kind == 9:
        return out + value
    return out + struct.pack(_FORMATS[kind], value)


def _frame(headers: bytes, payload: bytes) -> bytes:
    prelude = struct.pack("!II", 16 + len(headers) + len(payload), len(headers))
    prelude += struct.pack("!I", zlib.crc32(prelude))
    body = prelude + headers + payload
    return body + struct.pack("!I", zlib.crc32(body))


_FRAME = st.builds(
    lambda headers, payload: _frame(b"".join(_header(n, k, v) for n, (k, v) in headers.items()), payload),
    st.dictionaries(st.text(min_size=1, max_size=20).filter(lambda n: len(n.encode()) < 256), _VALUES, max_size=6),
    st.binary(max_size=300),
)


def _botocore(stream: bytes) -> list[tuple[dict, bytes]]:
    buffer = EventStreamBuffer()
    buffer.add_data(stream)
    return [(dict(m.headers), m.payload) for m in buffer]


def _ours(stream: bytes, cuts: list[int]) -> list[tuple[dict, bytes]]:
    decoder, out, at = FrameDecoder(), [], 0
    for cut in sorted(cuts) + [len(stream)]:
        out.extend(decoder.feed(stream[at:cut]))
        at = cut
    assert decoder.pending() == 0
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(_FRAME, min_size=1, max_size=6), st.data())
def test_random_frames_split_anywhere_decode_as_botocore_decodes_them(frames, data):
    stream = b"".join(frames)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=8))
    assert _ours(stream, cuts) == _botocore(stream)


@settings(max_examples=200, deadline=None)
@given(_FRAME, st.data())
def test_a_flipped_byte_is_refused_like_botocore_refuses_it(frame, data):
    at = data.draw(st.integers(0, len(frame) - 1))
    corrupt = bytearray(frame)
    corrupt[at] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(ParserError):
        _botocore(bytes(corrupt))
    # a CRC32 catches every one-bit error, and the prelude's is checked before its lengths are believed
    with pytest.raises(FrameError):
        FrameDecoder().feed(bytes(corrupt))


def test_a_partial_frame_waits_and_the_rest_completes_it():
    frame = encode_frame({":event-type": "chunk", ":message-type": "event"}, b'{"bytes":"e30="}')
    decoder = FrameDecoder()
    assert decoder.feed(frame[:5]) == [] and decoder.pending() == 5
    assert decoder.feed(frame[5:-1]) == [] and decoder.pending() == len(frame) - 1
    assert decoder.feed(frame[-1:] + frame) == [({":event-type": "chunk", ":message-type": "event"},
                                                 b'{"bytes":"e30="}')] * 2
    assert decoder.pending() == 0


@pytest.mark.parametrize("case", ["headers longer than the frame", "unknown header type", "header past its end",
                                  "frame too short"])
def test_lengths_that_do_not_hold_are_refused(case):
    if case == "headers longer than the frame":
        prelude = struct.pack("!II", 20, 10)
        stream = prelude + struct.pack("!I", zlib.crc32(prelude)) + b"\0" * 8
    elif case == "frame too short":
        prelude = struct.pack("!II", 12, 0)
        stream = prelude + struct.pack("!I", zlib.crc32(prelude)) + b"\0" * 4
    elif case == "unknown header type":
        stream = _frame(b"\x01a\x0b", b"")
    else:
        stream = _frame(b"\x01a\x07\x00\x09abc", b"")
    with pytest.raises(FrameError):
        FrameDecoder().feed(stream)
