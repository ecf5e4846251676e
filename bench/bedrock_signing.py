"""What Bedrock costs the hot path: SigV4 signing per request, event-stream decoding per stream.

Both run on the event loop (signing when the route is built, decoding in the stream pipe),
so each must stay far below the loop's 2 ms budget. Measured against what the Anthropic
route does in the same place (nothing to sign; SSE splitting of the same events).

    .venv/bin/python bench/bedrock_signing.py
"""

from __future__ import annotations

import time

import orjson
import trio
from botocore.credentials import Credentials
from botocore.eventstream import EventStreamBuffer

from gatewayd.formats.eventstream import EventStreamSplitter, FrameDecoder, chunk_frame
from gatewayd.formats.sse import SSESplitter, encode
from gatewayd.cloud.bedrock_auth import AwsAuth

URL = "https://bedrock-runtime.us-east-1.amazonaws.com/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke"


def per_call_us(fn, n: int) -> float:
    fn()
    began = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - began) / n * 1e6


def loop_time_us(auth: AwsAuth, body: bytes, headers: dict[str, str], n: int) -> float:
    """The mean CPU time of ``signed_headers`` on the trio thread (thread_time counts only
    the calling thread: the worker's hashing is not counted, the loop's waiting costs none)."""

    async def run() -> float:
        await auth.signed_headers(URL, body, headers)
        spent = 0.0
        for _ in range(n):
            began = time.thread_time()
            await auth.signed_headers(URL, body, headers)
            spent += time.thread_time() - began
        return spent / n * 1e6

    return trio.run(run)


def main() -> None:
    auth = AwsAuth(region="us-east-1", source=Credentials("AKIDEXAMPLE", "secret", "token"))
    headers = {"content-type": "application/json", "accept": "application/json"}
    print("SigV4 signing (headers for one request):")
    for size in (1_000, 100_000, 1_000_000, 10_000_000):
        body = b'{"messages":[{"role":"user","content":"' + b"x" * size + b'"}]}'
        n = 2000 if size <= 100_000 else 50 if size <= 1_000_000 else 5
        print(f"  body {size:>10,} B: {per_call_us(lambda: auth.headers(URL, body, headers), n):8.1f} us")

    print("SigV4 signing as a request does it (signed_headers: over 256 kB the hash is in a thread),")
    print("time on the event loop's thread per request (the HMACs; the hash's wait is not on it):")
    for size in (100_000, 1_000_000, 10_000_000):
        body = b'{"messages":[{"role":"user","content":"' + b"x" * size + b'"}]}'
        print(f"  body {size:>10,} B: {loop_time_us(auth, body, headers, 5 if size > 1_000_000 else 50):8.1f} us")

    events = [{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": f"word{i} "}}
              for i in range(1000)]
    frames = b"".join(chunk_frame(orjson.dumps(e)) for e in events)
    sse = b"".join(encode(e, event="content_block_delta") for e in events)

    def decode(data: bytes, make, chunk: int) -> None:
        splitter = make()
        for i in range(0, len(data), chunk):
            splitter.feed(data[i:i + chunk])

    def botocore_frames(data: bytes, chunk: int) -> None:
        buffer = EventStreamBuffer()
        for i in range(0, len(data), chunk):
            buffer.add_data(data[i:i + chunk])
            for _ in buffer:
                pass

    def our_frames(data: bytes, chunk: int) -> None:
        decoder = FrameDecoder()
        for i in range(0, len(data), chunk):
            decoder.feed(data[i:i + chunk])

    for chunk in (4096, 65536):
        reads = -(-len(frames) // chunk)
        print(f"stream of 1,000 text deltas ({len(frames):,} B), read in {chunk:,} B chunks:")
        for label, run in (
            ("frames only, botocore's EventStreamBuffer", lambda: botocore_frames(frames, chunk)),
            ("frames only, ours (FrameDecoder)", lambda: our_frames(frames, chunk)),
            ("splitter: frames, base64, SSE events", lambda: decode(frames, lambda: EventStreamSplitter(invoke=True),
                                                                    chunk)),
        ):
            total = per_call_us(run, 10)
            print(f"  {label:42s} {total / 1000:6.2f} us an event, {total / reads:8.1f} us a read")
        ss = per_call_us(lambda: decode(sse, SSESplitter, chunk), 10)
        print(f"  {'SSE of the same events (Anthropic route)':42s} {ss / 1000:6.2f} us an event")


if __name__ == "__main__":
    main()
