"""Recorded llama-osd-stream runs (tests/llamacpp/fixtures) and the tokenizers that recorded them.

Each recorded run `NAME` has `NAME_queries.json` (the served records), `NAME_stream.jsonl`
(`--osd-mode both --osd-dump-ids`: target-only, draft-only and speculative lines) and `NAME_meta.json`
(the tokenizer folder, whether its chat template was used, the command that recorded it). The build is never needed here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).parents[2]
RECORDED = sorted(p.name.removesuffix("_meta.json") for p in FIXTURES.glob("*_meta.json"))


def recorded_paths(name: str) -> dict[str, Path]:
    return {kind: FIXTURES / f"{name}_{kind}" for kind in ("queries.json", "stream.jsonl", "meta.json")}


def recorded_tokenizer(name: str):
    meta = json.loads(recorded_paths(name)["meta.json"].read_text())
    path = ROOT / meta["tokenizer"]
    if not path.exists():
        pytest.skip(f"{path} (the tokenizer of recorded run {name}) is not in this checkout")
    tok = AutoTokenizer.from_pretrained(path)
    if not meta.get("chat_template", True):
        tok.chat_template = None  # recorded with the vicuna_v1.1 fallback
    return tok
