"""benchmarks/draft_profile.py's training pass: each draft distilled by osd.train on the tiny pair."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from osd.paths import TINY_TEACHER_PATH

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "draft_profile.py"


@pytest.mark.slow
def test_training_pass_distils_every_draft_with_osd_train(tmp_path):
    main = runpy.run_path(str(SCRIPT))["main"]
    argv = ["--target", str(TINY_TEACHER_PATH), "--dtype", "float32", "--depths", "1", "--widths", "64", "128",
            "--train_steps", "4", "--train_batch", "2", "--lr", "3e-3", "--eval_prompts", "2", "--repeats", "1",
            "--out", str(tmp_path)]  # fmt: skip
    rows = main(argv)
    assert [(r["depth"], r["width"]) for r in rows] == [(1, 64), (1, 128)]
    for r in rows:
        assert r["distill_steps"] == 4
        work = tmp_path / f"distill_d1_w{r['width']}"
        assert json.loads((work / "distill" / "run.json").read_text())  # an osd.train run folder
        init, trained = (load_file(str(work / d / "model.safetensors")) for d in ("init", "distill"))
        assert init.keys() == trained.keys()
        assert any(not torch.equal(init[k], trained[k]) for k in init)  # the distillation moved the draft
        assert 0.0 <= r["alpha"] <= 1.0
    record = json.loads((tmp_path / "results.json").read_text())
    assert "osd.train distillation" in record["alpha_source"]
