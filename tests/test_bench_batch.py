"""benchmarks/bench_batch.py on the tiny pair: the engine's plain decoding always runs, and every speedup is over
the faster of it and HF's batched generate."""

from __future__ import annotations

import json

import pytest

from benchmarks.bench_batch import main
from osd.paths import TINY_DRAFT_PATH, TINY_TEACHER_PATH


@pytest.mark.parametrize("flags", [[], ["--hf_target_step", "--hf_draft_step"]])
def test_speedups_are_over_the_fastest_target_alone(tmp_path, flags):
    rows = main(["--target", str(TINY_TEACHER_PATH), "--draft", str(TINY_DRAFT_PATH), "--dtype", "float32",
                 "--batch_sizes", "1", "2", "--num_prompts", "2", "--max_new_tokens", "6", "--gammas", "2",
                 "--out", str(tmp_path), *flags])  # fmt: skip
    assert [(r["batch size"], r["gamma"]) for r in rows] == [(1, "0"), (1, "2"), (2, "0"), (2, "2")]
    for b in (1, 2):
        plain, spec = (r for r in rows if r["batch size"] == b)
        assert plain["target alone tok/s"] == max(plain["HF generate tok/s"], plain["spec tok/s"])
        assert spec["speedup"] == pytest.approx(spec["spec tok/s"] / plain["target alone tok/s"])
        assert plain["alpha"] is None and 0 <= spec["alpha"] <= 1 and spec["verify cost"] > 0
        # greedy, EOS ignored: plain decoding takes one pass a token (the prefill's gives the first) in every row
        assert plain["batch steps"] == plain["row steps"] == 6 and plain["draft s"] < spec["draft s"]
        assert spec["row steps"] <= spec["batch steps"] <= 6
    recorded = json.loads((tmp_path / "results.json").read_text())
    assert recorded["command"].startswith("python -m benchmarks.bench_batch --target")
    assert recorded["rows"] == rows and (tmp_path / "speedup.png").exists()
