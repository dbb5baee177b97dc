"""benchmarks/step_costs.py on tiny configs: random-weight models of the described shapes, Eq. 2 from
the measured costs, the sub-vocabulary head installed from the draft's config."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks.step_costs import main
from osd.cost_model import speedup_measured_verify
from osd.models import random_model
from osd.spec.draft_vocab import SubVocabHead
from tests.tiny_models import tiny_llama_config


def test_costs_and_eq2_come_from_configs_alone(tmp_path):
    tiny_llama_config(layers=4, hidden=64).save_pretrained(tmp_path / "target")  # config.json, no weights
    draft = tiny_llama_config(layers=1)
    draft.draft_vocab = list(range(0, 64, 2))
    draft.save_pretrained(tmp_path / "draft")
    assert isinstance(random_model(str(tmp_path / "draft"), torch.float32, "cpu").lm_head, SubVocabHead)
    out = tmp_path / "costs.json"
    result = main(["--target", str(tmp_path / "target"), "--draft", str(tmp_path / "draft"), "--dtypes", "float32",
                   "--context", "8", "--max_gamma", "3", "--alpha", "0.2", "0.8", "--out", str(out)])  # fmt: skip
    (run,) = result["runs"]
    assert run["c"] == pytest.approx(run["draft_ms"] / run["target_ms"]) and run["target_ms"] > 0
    assert sorted(run["verify_cost"]) == [1, 2, 3]
    for alpha, table in run["eq2_measured_verify"].items():
        for k, s in table["per_gamma"].items():
            assert s == pytest.approx(speedup_measured_verify(alpha, k, run["c"], run["verify_cost"][k]))
        assert table["best_speedup"] == max(table["per_gamma"].values())
    written = json.loads(out.read_text())
    assert written["command"].startswith("python -m benchmarks.step_costs --target")
    assert set(written["runs"][0]["eq2_measured_verify"]) == {"0.2", "0.8"}
