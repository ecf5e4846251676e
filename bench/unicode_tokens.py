"""How many tokens each script costs, over all of Unicode, against what the hold estimates.

For every code point of every plane (surrogates excepted; unassigned ones too: a client may
send them), o200k's tokens for the character alone; then, per script range, random strings
of its characters (runs, with and without spaces), whose tokens are compared with:

  - the old estimate: a third of the UTF-8 bytes (what attack N9 exploited);
  - the hold now, uncounted: non-ASCII bytes at a token each (the worst case);
  - the hold now, counted: the family's tokenizer run over the text (what the relay does when
    a body's non-ASCII text weighs).

Families: ``gpt`` is o200k itself; ``claude`` is counted as o200k x 3/2 and ``other``
(Gemini) as o200k (``gatewayd.tokens``: their tokenizers are not installable here). No
byte-level tokenizer (o200k, Claude's) or byte-fallback one (Gemini's SentencePiece) makes
more than a token a byte, which is the uncounted bound.

Then the estimator's cost on a 100 KB Japanese and a 100 KB Yi prompt (the counted path runs
in a worker thread in the relay; its time is CPU, not event loop).

    .venv/bin/python bench/unicode_tokens.py          # about a minute (all 1.1M code points)
    .venv/bin/python bench/unicode_tokens.py --quick  # the script table only
"""

from __future__ import annotations

import random
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gatewayd import tokens  # noqa: E402
from gatewayd.billing.estimate import PER_MESSAGE_TOKENS, counted_estimate, estimate_input_tokens  # noqa: E402
from gatewayd.billing.foreign_text import ForeignText, counted_text  # noqa: E402

SCRIPTS = [
    ("Latin-1 / Latin Extended", 0x00A0, 0x024F),
    ("Greek, Cyrillic", 0x0370, 0x04FF),
    ("Arabic, Hebrew", 0x0590, 0x06FF),
    ("2-byte (all)", 0x0080, 0x07FF),
    ("Devanagari .. Thai", 0x0900, 0x0E7F),
    ("Braille", 0x2800, 0x28FF),
    ("Hiragana, Katakana", 0x3040, 0x30FF),
    ("CJK Unified (URO)", 0x4E00, 0x9FFF),
    ("Yi", 0xA000, 0xA48C),
    ("Hangul syllables", 0xAC00, 0xD7A3),
    ("Private use (BMP)", 0xE000, 0xF8FF),
    ("3-byte (all)", 0x0800, 0xFFFF),
    ("Emoji", 0x1F300, 0x1FAFF),
    ("CJK Extension B", 0x20000, 0x2A6DF),
    ("Plane 3 (CJK Ext G/H, unassigned)", 0x30000, 0x3FFFD),
    ("Planes 4-16 (unassigned, PUA)", 0x40000, 0x10FFFD),
]


def utf8_len(cp: int) -> int:
    return 1 if cp < 0x80 else 2 if cp < 0x800 else 3 if cp < 0x10000 else 4


def code_points(first: int, last: int) -> list[int]:
    return [cp for cp in range(first, last + 1) if not 0xD800 <= cp <= 0xDFFF]


def isolated_counts() -> dict[int, int]:
    enc = tokens.encoding()
    cps = code_points(0x80, 0x10FFFF)
    counts = enc.encode_ordinary_batch([chr(cp) for cp in cps], num_threads=2)
    return {cp: len(c) for cp, c in zip(cps, counts)}


def held(text: str, *, counted: bool, family: str = "gpt") -> int:
    body = {"messages": [{"role": "user", "content": text}]}
    if not counted:
        return estimate_input_tokens(body, "chat") - PER_MESSAGE_TOKENS
    return counted_estimate(body, "chat", family) - PER_MESSAGE_TOKENS


def runs_table(rng: random.Random) -> None:
    print("\nRandom text of each range (200 strings of 50-2,000 characters, half with spaces):")
    print("| range | bytes / char | o200k tokens / char (worst) | o200k / (bytes / 3) (worst) "
          "| o200k / hold uncounted (worst) | o200k / hold counted (worst) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, first, last in SCRIPTS:
        pool = code_points(first, last)
        worst_per_char = worst_old = worst_uncounted = worst_counted = 0.0
        size = 0.0
        for i in range(200):
            n = rng.choice((50, 300, 2_000))
            chars = [chr(rng.choice(pool)) for _ in range(n)]
            if i % 2:
                chars = [c + (" " if rng.random() < 0.2 else "") for c in chars]
            text = "".join(chars)
            real = tokens.count(text)
            size = len(text.encode("utf-8", "surrogatepass")) / len(text)
            worst_per_char = max(worst_per_char, real / n)
            worst_old = max(worst_old, real / -(-len(text.encode("utf-8", "surrogatepass")) // 3))
            worst_uncounted = max(worst_uncounted, real / held(text, counted=False))
            worst_counted = max(worst_counted, real / held(text, counted=True))
        print(f"| {name} U+{first:04X}-U+{last:04X} | {size:.1f} | {worst_per_char:.2f} | {worst_old:.2f} "
              f"| {worst_uncounted:.2f} | {worst_counted:.2f} |")


def isolated_table() -> None:
    started = time.perf_counter()
    counts = isolated_counts()
    print(f"o200k over every code point U+0080-U+10FFFF ({len(counts):,}, {time.perf_counter() - started:.0f} s):")
    by = Counter((utf8_len(cp), n) for cp, n in counts.items())
    print("| UTF-8 bytes | tokens alone | code points | tokens / byte |")
    print("|---:|---:|---:|---:|")
    for (b, n), k in sorted(by.items()):
        print(f"| {b} | {n} | {k:,} | {n / b:.2f} |")
    worst = max(n / utf8_len(cp) for cp, n in counts.items())
    print(f"worst tokens a byte, alone: {worst:.2f} (a token a byte is the most any byte-level tokenizer makes)")


def timing() -> None:
    print("\nThe estimator on 100 KB prompts (median of 20, this machine):")
    rng = random.Random(5)
    texts = {"japanese": "日本語のテキストです。トークンの数を見積もります。" * 1_300,
             "yi": "".join(chr(rng.randint(0xA000, 0xA48C)) for _ in range(33_000)),
             "ascii prose": (ROOT / "docs" / "billing.md").read_text()[:100_000]}
    for name, text in texts.items():
        body = {"messages": [{"role": "user", "content": text}]}
        def count() -> None:
            foreign = ForeignText()
            with counted_text(foreign):
                estimate_input_tokens(body, "chat")
            foreign.count("gpt")

        for label, fn in (("estimate (event loop)", lambda: estimate_input_tokens(body, "chat")),
                          ("count (worker thread)", count)):
            times = []
            for _ in range(20):
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
            times.sort()
            kb = len(text.encode()) / 1024
            print(f"  {name:12} {label:24} {times[10] * 1000:7.3f} ms  ({times[10] * 1e6 / kb:.1f} us/KB)")


def main() -> None:
    if "--quick" not in sys.argv:
        isolated_table()
    runs_table(random.Random(30))
    timing()


if __name__ == "__main__":
    main()
