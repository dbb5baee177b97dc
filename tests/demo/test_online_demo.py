"""The main job's entry point end to end, on the tiny pair (the default pair takes minutes)."""

from __future__ import annotations

import json

from osd.demo import DOMAINS, TINY_DRAFT_PATH, TINY_TEACHER_PATH
from osd.demo.online_demo import main


def test_online_demo_serves_distils_and_reports_alpha_and_latency(tmp_path, capsys):
    out = tmp_path / "demo"
    summary = main(["--target", str(TINY_TEACHER_PATH), "--draft", str(TINY_DRAFT_PATH), "--dtype", "float32",
                    "--draft_dtype", "bfloat16", "--per_domain", "3", "--tail", "2", "--max_new_tokens", "8",
                    "--output_dir", str(out)])  # fmt: skip
    assert [r["domain"] for r in summary["domains"]] == list(DOMAINS)
    assert summary["updates"] == 3 * len(DOMAINS)
    for row in summary["domains"]:
        assert len(row["queries"]) == 2 and 0.0 <= row["online"]["alpha"] <= 1.0
        assert 0.0 <= row["standard"]["alpha"] <= 1.0
        # greedy: the three ways of serving a query emit the same tokens (tiny fp32 target: no near-ties)
        assert row["standard"]["sd_tokens"] == row["standard"]["target_tokens"] == row["online"]["tokens"]
    printed = capsys.readouterr().out
    assert "latency on the same queries" in printed and "all" in printed
    assert (out / "alpha.png").stat().st_size > 0 and (out / "draft" / "config.json").exists()
    assert json.loads((out / "summary.json").read_text())["args"]["draft_dtype"] == "bfloat16"
