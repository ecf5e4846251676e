"""The hold's input estimate: what it costs and how far it lands from real token counts.

Builds Claude Code-, Codex- and chat-shaped bodies of growing size from the checkout's own
text (docs as prose, gatewayd/ as the code agents read back in tool results), then prints
for each:

  - the estimator's time per KB of body (median; JSON parsing excluded, it is timed apart),
    and the longest single call, which bounds how long it holds the event loop;
  - the estimate against the o200k tokenizer run over exactly the text the estimate reads
    (same flat allowances for media), and against the simulator's own count.

A benchmark that prints figures, not a test. Usage: .venv/bin/python bench/estimate.py
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

from gatewayd import tokens  # noqa: E402
from gatewayd.billing import estimate  # noqa: E402
from gatewayd.sim.behaviour import count_input_tokens  # noqa: E402

PROSE = "".join(Path(p).read_text() for p in sorted(glob.glob(str(ROOT / "docs" / "*.md"))))
CODE = [Path(p).read_text() for p in sorted(glob.glob(str(ROOT / "gatewayd" / "**" / "*.py"), recursive=True))]
SCHEMA = {"type": "object", "properties": {
    "file_path": {"type": "string", "description": "The absolute path to the file to read"},
    "offset": {"type": "number", "description": "The line number to start reading from"},
    "type": {"type": "string", "enum": ["file", "directory"]}}, "required": ["file_path"]}


def _files(size: int) -> list[str]:
    """Source files, cycling, until about ``size`` bytes."""
    out, total, i = [], 0, 0
    while total < size:
        out.append(CODE[i % len(CODE)])
        total += len(out[-1])
        i += 1
    return out


def claude_code(size: int) -> dict:
    messages = [{"role": "user", "content": "Fix the failing test in the relay, please."}]
    for i, text in enumerate(_files(size)):
        messages.append({"role": "assistant", "content": [
            {"type": "thinking", "thinking": PROSE[i * 300:(i + 1) * 300], "signature": "Eq" + "A" * 300},
            {"type": "tool_use", "id": f"toolu_{i}", "name": "Read", "input": {"file_path": f"/src/f{i}.py"}}]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": [{"type": "text", "text": text}]}]})
    return {"model": "claude-sonnet-4-5", "max_tokens": 32000, "stream": True,
            "system": [{"type": "text", "text": PROSE[:15_000], "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": f"Tool{i}", "description": PROSE[i * 500:(i + 1) * 500], "input_schema": SCHEMA}
                      for i in range(18)],
            "messages": messages}


def codex(size: int) -> dict:
    items: list[dict] = [{"type": "message", "role": "developer", "content": [{"type": "input_text",
                                                                             "text": PROSE[:4_000]}]},
                         {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}]
    for i, text in enumerate(_files(size)):
        items.append({"type": "reasoning", "id": f"rs_{i}", "summary": [], "encrypted_content": "gAAAAB" + "x" * 600})
        items.append({"type": "function_call", "call_id": f"c{i}", "name": "shell",
                      "arguments": orjson.dumps({"command": ["cat", f"f{i}.py"]}).decode()})
        items.append({"type": "function_call_output", "call_id": f"c{i}", "output": text})
    return {"model": "gpt-5-codex", "instructions": PROSE[:12_000], "input": items, "stream": True,
            "tools": [{"type": "function", "name": "shell", "parameters": SCHEMA},
                      {"type": "custom", "name": "apply_patch", "format": {"type": "grammar", "syntax": "lark",
                                                                          "definition": PROSE[:2_000]}}]}


def chat(size: int) -> dict:
    messages = [{"role": "system", "content": "You are a helpful assistant."}]
    text = PROSE * (1 + size // len(PROSE))
    for i in range(0, size, 2_000):
        messages.append({"role": "user" if i % 4_000 else "assistant", "content": text[i:i + 2_000]})
    return {"model": "gpt-4.1-mini", "messages": messages}


def exact(body: dict, fmt: str) -> int:
    """The o200k count of exactly what the estimate reads: its measure, tokenized instead."""
    seen: list[str] = []
    original = estimate._Tally.text, estimate._Tally.json

    def text(self, value):
        if isinstance(value, str):
            seen.append(value)
        else:
            original[0](self, value)

    def as_json(self, value):
        if value is not None:
            seen.append(orjson.dumps(value).decode())

    estimate._Tally.text, estimate._Tally.json = text, as_json
    try:
        tally = estimate._Tally()
        estimate._READERS[fmt](body, tally)
    finally:
        estimate._Tally.text, estimate._Tally.json = original
    return sum(tokens.count(s) for s in seen) + tally.tokens


def timed(fn, *args, repeat: int) -> tuple[float, float]:
    """(median, max) CPU seconds of ``repeat`` calls: thread CPU time, so that the other
    processes sharing the machine's cores do not show up as the estimator's cost."""
    times = []
    for _ in range(repeat):
        start = time.thread_time()
        fn(*args)
        times.append(time.thread_time() - start)
    return statistics.median(times), max(times)


def main() -> None:
    tokens.count("warm up")
    print(f"{'body':<22}{'KB':>7}{'parse us/KB':>13}{'estimate us/KB':>16}{'median ms':>11}{'max ms':>8}"
          f"{'estimate':>10}{'o200k':>9}{'est/o200k':>11}{'sim':>9}{'est/sim':>9}")
    for name, build, fmt, protocol in (("chat", chat, "chat", "chat"),
                                       ("Claude Code messages", claude_code, "messages", "messages"),
                                       ("Codex responses", codex, "responses", "responses")):
        for size in (2_000, 100_000, 600_000, 2_000_000):
            body = build(size)
            raw = orjson.dumps(body)
            kb = len(raw) / 1024
            repeat = max(20, int(2_000_000 / len(raw)))
            parse, _ = timed(orjson.loads, raw, repeat=repeat)
            mean, worst = timed(estimate.estimate_input_tokens, body, fmt, repeat=repeat)
            est = estimate.estimate_input_tokens(body, fmt)
            real = exact(body, fmt)
            sim = count_input_tokens(body, protocol)
            print(f"{name:<22}{kb:>7.0f}{parse * 1e6 / kb:>13.2f}{mean * 1e6 / kb:>16.2f}{mean * 1e3:>11.3f}{worst * 1e3:>8.2f}"
                  f"{est:>10}{real:>9}{est / real:>11.2f}{sim:>9}{est / sim:>9.2f}")


if __name__ == "__main__":
    main()
