"""benchmarks/gpu_scale.py's arithmetic: Eq. 2 per domain from measured costs and the CPU's alphas (the run
itself, tiny shapes on the CPU, is a stage of the GPU checks' dry run: tests/test_gpu_checks.py)."""

from __future__ import annotations

import json

import pytest

from benchmarks.gpu_scale import CPU_ALPHAS, cpu_alphas, eq2_rows
from osd.cost_model import expected_tokens_per_step, speedup_measured_verify
from osd.paths import DOMAINS


def test_eq2_rows_follow_the_cost_model_and_charge_only_the_online_draft() -> None:
    costs = {"target_ms": 20.0, "c": 0.1, "verify_cost": {1: 1.0, 2: 1.05, 3: 1.1, 4: 1.6}}
    rows = eq2_rows(costs, {"sql": {"standard": 0.4, "online": 0.6}}, gamma=3, charge=1.25)
    standard, online = rows
    assert standard["Eq. 2 at gamma 3"] == speedup_measured_verify(0.4, 3, 0.1, 1.1)
    assert standard["ms/token"] == pytest.approx(20.0 * (3 * 0.1 + 1.1) / expected_tokens_per_step(0.4, 3))
    best = max(
        costs["verify_cost"], key=lambda k: speedup_measured_verify(0.6, k, 0.1, costs["verify_cost"][k])
    )
    assert online["best gamma"] == best and best != 4  # the dearer 5-token pass is never the best here
    assert standard["with its update"] is None
    assert online["with its update"] == pytest.approx(online["Eq. 2 at gamma 3"] / 1.25)


def test_the_recorded_cpu_alphas_cover_every_domain_and_a_wrong_file_is_named(tmp_path) -> None:
    alphas = cpu_alphas(str(CPU_ALPHAS))
    assert set(alphas) == set(DOMAINS) and all(0 < a["standard"] < a["online"] < 1 for a in alphas.values())
    bad = tmp_path / "summary.json"
    bad.write_text(json.dumps({"domains": [{"domain": "sql"}]}))
    with pytest.raises(ValueError, match=f"--alphas {bad}: not a main-job summary.json"):
        cpu_alphas(str(bad))
