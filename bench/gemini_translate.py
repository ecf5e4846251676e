"""What the Gemini translation costs on the request path, in CPU per request.

Prints, for chat bodies of growing size (a tool-using conversation whose tool results
are the checkout's own source, as an agent's are): the median time of
``chat_request_to_gemini`` plus ``orjson.dumps`` of the result; then, for answers of
growing length, the median time of ``gemini_response_to_chat`` on a whole answer and of
``GeminiToChatStream`` over the same answer streamed as the simulator streams it (one
event per word), per event. A benchmark that prints figures, not a test.

Usage: .venv/bin/python bench/gemini_translate.py
"""

from __future__ import annotations

import glob
import statistics
import sys
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gatewayd.formats.chat_to_gemini import chat_request_to_gemini  # noqa: E402
from gatewayd.formats.gemini_to_chat import GeminiToChatStream, gemini_response_to_chat  # noqa: E402
from gatewayd.formats.sse import SSESplitter  # noqa: E402
from gatewayd.sim import gemini as sim_gemini  # noqa: E402
from gatewayd.sim.behaviour import plan  # noqa: E402

CODE = [Path(p).read_text() for p in sorted(glob.glob(str(ROOT / "gatewayd" / "**" / "*.py"), recursive=True))]
TOOLS = [{"type": "function", "function": {"name": f"tool_{i}", "description": "Reads a file",
                                            "parameters": {"type": "object", "properties": {
                                                "path": {"type": "string"}, "offset": {"type": ["integer", "null"]}},
                                                "required": ["path"], "additionalProperties": False}}}
         for i in range(12)]


def conversation(turns: int) -> dict:
    messages = [{"role": "system", "content": "You are a coding agent."}]
    for i in range(turns):
        call_id = f"call_{i}"
        messages += [
            {"role": "user", "content": f"Read file number {i}."},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "tool_0", "arguments": '{"path": "x.py"}'}}]},
            {"role": "tool", "tool_call_id": call_id, "content": CODE[i % len(CODE)]},
        ]
    messages.append({"role": "user", "content": "Summarise."})
    return {"model": "gemini-2.5-flash", "messages": messages, "tools": TOOLS, "stream": True}


def median_us(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def main() -> None:
    print("request: chat -> Gemini (translate + encode)")
    for turns in (1, 10, 40):
        body = conversation(turns)
        size = len(orjson.dumps(body))
        us = median_us(lambda: orjson.dumps(chat_request_to_gemini(body)), 200)
        print(f"  {turns:3d} tool turns, {size / 1024:7.1f} KB body: {us:8.1f} us  ({us / (size / 1024):5.2f} us/KB)")

    print("answer: Gemini -> chat (whole, and streamed per event)")
    for words in (10, 200, 2000):
        upstream = {"contents": [{"role": "user", "parts": [{"text": f"[[sim:words={words}]]"}]}],
                    "model": "gemini-2.5-flash"}
        reply = plan(sim_gemini.extract(upstream))
        whole = sim_gemini.render(reply, upstream, 1)
        raw = b"".join(data for data, _ in sim_gemini.events(reply, upstream, 1))
        whole_us = median_us(lambda: orjson.dumps(gemini_response_to_chat(
            whole, model="m", created=0, completion_id="chatcmpl-x")), 200)

        def streamed():
            s = GeminiToChatStream(model="m", created=0, include_usage=True, chunk_id="chatcmpl-x")
            for event in SSESplitter().feed(raw):
                for chunk in s.feed(orjson.loads(event.data)):
                    orjson.dumps(chunk)

        events = words + 1
        stream_us = median_us(streamed, 50)
        print(f"  {words:5d} words: whole {whole_us:7.1f} us; stream {stream_us:9.1f} us for {events} events "
              f"({stream_us / events:5.2f} us/event, split + parse + translate + encode)")


if __name__ == "__main__":
    main()
