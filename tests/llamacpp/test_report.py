"""The latency report over recorded llama-osd-stream output, and the alpha mapping it uses."""

from __future__ import annotations

import json
import random

import pytest
from llamacpp_recorded import RECORDED, recorded_paths

from llamacpp_patches.report import ALL, alpha_from_acceptance, load_lines, main, summarize
from osd.cost_model import speedup


def recorded_lines(name: str) -> list[dict]:
    return load_lines(recorded_paths(name)["stream.jsonl"])


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.6, 0.85])
@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_alpha_from_acceptance_recovers_simulated_iid_alpha(alpha, gamma):
    # a step accepts the draft tokens before the first rejection, each accepted w.p. alpha
    rng = random.Random(0)
    steps, accepted = 20_000, 0
    for _ in range(steps):
        n = 0
        while n < gamma and rng.random() < alpha:
            n += 1
        accepted += n
    acceptance = accepted / (steps * gamma)
    assert alpha_from_acceptance(acceptance, gamma) == pytest.approx(alpha, abs=0.015)


def test_full_acceptance_maps_to_alpha_one():
    assert alpha_from_acceptance(1.0, 5) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("name", RECORDED)
def test_greedy_speculative_output_equals_the_target_baseline(name):
    """Recorded from the real binary: the speculative loop reproduces target-only greedy decoding."""
    lines = recorded_lines(name)
    spec = [x for x in lines if x["mode"] == "speculative"]
    base = {x["id"]: x for x in lines if x["mode"] == "baseline" and x["model"] == spec[0]["model"]}
    assert spec and len(base) == len(spec)
    for x in spec:
        assert x["output_ids"] == base[x["id"]]["output_ids"], x["id"]
        # each verification step yields the accepted draft tokens plus one target token (EOS may cut it)
        assert x["generated_tokens"] <= x["accepted"] + x["steps"]
        assert x["generated_tokens"] == x["accepted"] + x["steps"] or x["eos"]
        assert x["drafted"] <= x["gamma"] * x["steps"]


@pytest.mark.parametrize("name", RECORDED)
def test_summary_recomputes_measured_and_predicted_speedup(name):
    lines = recorded_lines(name)
    rows = summarize(lines)
    spec = [x for x in lines if x["mode"] == "speculative"]
    target, draft = spec[0]["model"], spec[0]["draft_model"]
    datasets = {x["dataset"] for x in spec}
    assert {r.dataset for r in rows} == (datasets | {ALL} if len(datasets) > 1 else datasets)
    for r in rows:

        def sel(mode, model, r=r):
            return [
                x
                for x in lines
                if x["mode"] == mode and x["model"] == model and r.dataset in (ALL, x["dataset"])
            ]

        s, b, d = sel("speculative", target), sel("baseline", target), sel("baseline", draft)
        base_mpt = sum(x["decode_ms"] for x in b) / sum(x["generated_tokens"] for x in b)
        spec_mpt = sum(x["decode_ms"] for x in s) / sum(x["generated_tokens"] for x in s)
        c = sum(x["decode_ms"] for x in d) / sum(x["generated_tokens"] for x in d) / base_mpt
        acceptance = sum(x["accepted"] for x in s) / sum(x["drafted"] for x in s)
        assert r.queries == len(s)
        assert r.speedup == pytest.approx(base_mpt / spec_mpt)
        assert r.acceptance == pytest.approx(acceptance)
        assert r.c == pytest.approx(c)
        assert r.predicted == pytest.approx(speedup(r.alpha, r.gamma, c))
        assert r.same_output == 1.0


def test_a_malformed_line_is_reported_with_file_and_line(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text('{"id": "a"}\n')
    with pytest.raises(ValueError, match=r"run\.jsonl:1: missing"):
        load_lines(path)
    path.write_text("\n{not json\n")
    with pytest.raises(ValueError, match=r"run\.jsonl:2: not a JSON line"):
        load_lines(path)


@pytest.mark.parametrize("name", RECORDED)
def test_a_missing_draft_baseline_names_the_draft(name):
    lines = recorded_lines(name)
    draft = next(x["draft_model"] for x in lines if x["mode"] == "speculative")
    spec_only = [x for x in lines if x["model"] != draft]
    with pytest.raises(ValueError, match="no draft-only baseline lines for .*--osd-mode baseline"):
        summarize(spec_only)


@pytest.mark.parametrize("name", RECORDED)
def test_cli_prints_the_table_and_writes_json(name, tmp_path, capsys):
    paths = recorded_paths(name)
    out = tmp_path / "summary.json"
    rows = main([str(paths["stream.jsonl"]), "--json", str(out)])
    printed = capsys.readouterr().out
    assert all(r.dataset in printed for r in rows)
    assert [r["speedup"] for r in json.loads(out.read_text())] == pytest.approx([r.speedup for r in rows])


@pytest.mark.parametrize("name", RECORDED)
def test_baselines_from_another_file_are_matched_by_query_id(name):
    lines = recorded_lines(name)
    draft = next(x["draft_model"] for x in lines if x["mode"] == "speculative")
    moved = [{**x, "file": "other.jsonl"} if x["model"] == draft else x for x in lines]
    assert [r.c for r in summarize(moved)] == pytest.approx([r.c for r in summarize(lines)])
    some = {x["id"] for x in lines[:3]}
    with pytest.raises(ValueError, match="no draft-only baseline lines"):
        summarize([x for x in moved if x["model"] != draft or x["id"] in some])
