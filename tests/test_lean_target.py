"""benchmarks.lean_target: both paths timed in every layout on offer, written with the machine."""

from __future__ import annotations

import json

from benchmarks import lean_target
from osd.spec.serving_choice import available_layouts
from tests.tiny_models import tiny_llama


def test_every_layout_on_offer_is_timed_through_both_paths(tmp_path):
    tiny_llama(seed=1).config.save_pretrained(tmp_path / "target")
    out = tmp_path / "lean.json"
    lean_target.main(["--target", str(tmp_path / "target"), "--context", "8", "--max_length", "3",
                      "--rounds", "1", "--reps", "2", "--out", str(out)])  # fmt: skip
    result = json.loads(out.read_text())
    assert list(result["layouts"]) == available_layouts()
    for timed in result["layouts"].values():
        for path in ("hf", "lean"):
            assert len(timed[path]["pass_ms"]) == 3 and min(timed[path]["pass_ms"]) > 0
        assert timed["lean_over_hf_step"] == timed["lean"]["pass_ms"][0] / timed["hf"]["pass_ms"][0]
    assert result["machine"]["torch_threads"] == 1 and result["command"].startswith(
        "python -m benchmarks.lean_target"
    )
