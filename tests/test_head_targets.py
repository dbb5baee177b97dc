"""benchmarks/head_targets.py: Eq. 2 inverted with a run's measured costs. A head with the draft model's costs and
speeds needs the draft model's alpha for the same speedup, more for a larger one, and none reaches a speedup past
gamma + 1 tokens a verification."""

from __future__ import annotations

import json

import pytest

from benchmarks.head_targets import main
from osd.cost_model import speedup_measured_verify

GAMMA, ALPHA, COSTS = 3, 0.5, {"c": 0.05, "verify_cost": 1.1, "baseline_step": 1.0}


def drafter_run(alpha: float, share: float, ceiling: float | None = None) -> dict:
    """One drafter's summary part over one domain: target alone at 10 tokens/s, Standard and online SD at
    `share` of Eq. 2 at `alpha`."""
    tokens = 100
    sd_s = 10 / (share * speedup_measured_verify(alpha, GAMMA, COSTS["c"], COSTS["verify_cost"]))
    row = {"domain": "sql", "standard": {"alpha": alpha, "sd_tokens": tokens, "sd_s": sd_s, "target_tokens": tokens,
                                         "target_s": 10.0},
           "online": {"alpha": alpha, "tokens": tokens, "s": sd_s}}  # fmt: skip
    if ceiling is not None:
        row["ceiling"] = ceiling
    eq2 = speedup_measured_verify(alpha, GAMMA, COSTS["c"], COSTS["verify_cost"]) * COSTS["baseline_step"]
    return {"costs": COSTS | {"eq2_standard": eq2, "eq2_online": eq2}, "domains": [row]}  # as machine_costs


@pytest.mark.parametrize("share", [1.0, 0.8])
def test_a_head_like_the_draft_model_needs_its_alpha_and_more_for_more(tmp_path, share):
    summary = {"command": "python -m osd.demo.online_demo --compare_head h", "serving": {"gamma": GAMMA},
               **drafter_run(ALPHA, share), "head": drafter_run(ALPHA, share, ceiling=0.6)}  # fmt: skip
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(summary))
    same = main(["--summary", str(path), "--ratio", "1.0"])["runs"]
    for run in ("standard", "online"):
        assert same[run]["model_share_of_eq2"] == pytest.approx(share)
        assert same[run]["head_alpha_needed_at_model_share"] == pytest.approx(ALPHA, abs=1e-6)
        assert (same[run]["head_alpha"], same[run]["head_ceiling"]) == (ALPHA, 0.6)
    more = main(["--summary", str(path), "--ratio", "1.3", "--out", str(tmp_path / "t.json")])["runs"][
        "online"
    ]
    goal = 1.3 * share * speedup_measured_verify(ALPHA, GAMMA, COSTS["c"], COSTS["verify_cost"])
    assert more["goal"] == pytest.approx(goal)
    needed = more["head_alpha_needed_full_eq2"]
    assert ALPHA < needed and speedup_measured_verify(needed, GAMMA, COSTS["c"], COSTS["verify_cost"]) == (
        pytest.approx(goal)
    )
    assert json.loads((tmp_path / "t.json").read_text())["command"].startswith(
        "python -m benchmarks.head_targets"
    )
    beyond = main(["--summary", str(path), "--ratio", "10"])["runs"]["online"]
    assert beyond["head_alpha_needed_full_eq2"] is None  # more than gamma + 1 tokens a verification


def test_a_summary_without_a_head_is_refused(tmp_path, capsys):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"serving": {"gamma": GAMMA}, **drafter_run(ALPHA, 1.0)}))
    with pytest.raises(ValueError, match="no head; run the main job with --compare_head"):
        main(["--summary", str(path)])
