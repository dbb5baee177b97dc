"""benchmarks.prompt_reuse: the target alone and Standard SD served with and without the prefix cache."""

from __future__ import annotations

import json

from benchmarks import prompt_reuse
from osd.paths import TINY_DRAFT_PATH, TINY_TEACHER_PATH


def test_both_methods_are_served_with_prefixes_taken_and_whole(tmp_path):
    out = tmp_path / "reuse.json"
    prompt_reuse.main(["--target", str(TINY_TEACHER_PATH), "--draft", str(TINY_DRAFT_PATH), "--per_domain", "2",
                       "--max_new_tokens", "4", "--rounds", "1", "--out", str(out)])  # fmt: skip
    result = json.loads(out.read_text())
    assert [(r["method"], r["reuse_prompt"]) for r in result["rows"]] == [
        ("target alone", False), ("target alone", True), ("Standard SD", False), ("Standard SD", True)
    ]  # fmt: skip
    assert (
        len({r["tokens"] for r in result["rows"]}) == 1 and 0 < result["rows"][0]["tokens"] <= 8 * 4
    )  # greedy
    assert all(r["tokens_per_s"] == r["tokens"] / r["s"] for r in result["rows"])
    assert 0 < result["reused_tokens"] < result["prompt_tokens"]  # a chat template's system prompt at least
    rate = {(r["method"], r["reuse_prompt"]): r["tokens_per_s"] for r in result["rows"]}
    assert result["speedup"]["prefix_taken"] == rate["Standard SD", True] / rate["target alone", True]
    assert (
        result["command"].startswith("python -m benchmarks.prompt_reuse")
        and result["machine"]["torch_threads"] == 1
    )
