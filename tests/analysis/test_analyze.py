"""analyze: DSD's output format and simulate's JSONL give the same report."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from osd.analysis.analyze import format_report, read_iterations, summarize
from osd.analysis.record import record_prompts
from osd.analysis.simulate import simulate, write_outputs
from tests.tiny_models import EOS, RANDOM_TOKENIZER, VOCAB, draft_from_target, tiny_model

FIX = Path(__file__).resolve().parent / "fixtures"


def test_dsd_output_split_into_prompts_where_the_count_drops():
    summary = summarize(read_iterations(FIX / "dsd_batch1.txt"))  # prompts 3,5,9 | 1,4 | 2,7,8
    assert [p["tokens_matched_per_iteration"] for p in summary["per_prompt"]] == pytest.approx(
        [3.0, 2.0, 8 / 3]
    )
    assert summary["dataset"]["tokens_matched_per_iteration"] == pytest.approx(21 / 8)
    assert "alpha" not in summary["dataset"]
    report = format_report(summary)
    assert report.splitlines() == [
        "Average tokens matched per prompt: [3.0000, 2.0000, 2.6667]",
        "Average tokens matched per dataset: [2.6250]",
    ]


def test_dsd_batched_rows_are_prompts_of_their_own():
    summary = summarize(read_iterations(FIX / "dsd_batch2.txt"))  # rows 3,5 and 2,6, then a new batch
    assert [p["tokens_matched_per_iteration"] for p in summary["per_prompt"]] == pytest.approx(
        [2.5, 3.0, 1.0, 4.0]
    )


def test_simulate_outputs_agree_with_the_simulation(tmp_path):
    target = tiny_model("llama", layers=2, seed=5)
    draft = draft_from_target(target, noise=0.5)
    prompts = [
        (f"p{i}", torch.randint(3, VOCAB, (6,), generator=torch.Generator().manual_seed(i)).tolist())
        for i in range(3)
    ]
    recording = record_prompts(
        target, prompts, {"tokenizer": RANDOM_TOKENIZER}, max_new_tokens=30, eos_token_id=EOS
    )
    results = simulate(recording, draft, RANDOM_TOKENIZER, gamma=3)
    jsonl, txt, _ = write_outputs(results, tmp_path / "sim", {})
    ours, dsd = summarize(read_iterations(jsonl)), summarize(read_iterations(txt))
    for got, sim in zip(ours["per_prompt"], results, strict=True):
        assert got["alpha"] == pytest.approx(sim.alpha)
        assert got["mean_accepted_length"] == pytest.approx(
            sum(sim.accepted_lengths) / len(sim.accepted_lengths)
        )
        assert got["tokens_matched_per_iteration"] == pytest.approx(got["mean_accepted_length"] + 1)
    assert [p["tokens_matched_per_iteration"] for p in dsd["per_prompt"]] == pytest.approx(
        [p["tokens_matched_per_iteration"] for p in ours["per_prompt"]]
    )
    steps = sum(len(r.iterations) for r in results)
    assert ours["dataset"]["iterations"] == steps
    assert ours["dataset"]["mean_accepted_length"] == pytest.approx(
        sum(sum(r.accepted_lengths) for r in results) / steps
    )
