"""benchmarks/bench_engine.py on the tiny pair: every method emits the target's greedy tokens, --data_drafts
serves each data file's prompts with its own draft, and --head adds an EAGLE-3 head's row."""

from __future__ import annotations

import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM

from benchmarks.bench_engine import main
from osd.paths import TINY_DRAFT_PATH, TINY_TEACHER_PATH, WORKLOAD_DIR
from osd.spec.eagle3 import save_head
from osd.spec.packed_linear import packing_available
from tests.tiny_models import distilled_head

DATA = [str(WORKLOAD_DIR / "sql_eval.json"), str(WORKLOAD_DIR / "code_eval.json")]


def run(tmp_path, *flags: str) -> dict:
    return main(["--target", str(TINY_TEACHER_PATH), "--dtype", "float32", "--draft_dtype", "float32",
                 "--data", *DATA, "--num_prompts", "2", "--max_new_tokens", "6", "--threads", "1",
                 "--output", str(tmp_path / "engine.json"), *flags])  # fmt: skip


@pytest.mark.slow
def test_each_data_file_is_served_by_its_own_draft(tmp_path):
    # code's "draft" is the target itself: it proposes the target's tokens, every one accepted
    shutil.copytree(TINY_DRAFT_PATH, tmp_path / "drafts" / "sql")
    shutil.copytree(TINY_TEACHER_PATH, tmp_path / "drafts" / "code")
    single = run(tmp_path, "--draft", str(TINY_DRAFT_PATH))
    per_file = run(tmp_path, "--data_drafts", str(tmp_path / "drafts" / "{domain}"))
    for result in (single, per_file):
        assert result["num_prompts"] == 4 and result["profile_top_ops"] is None  # not asked for: not run
        assert len(set(result["generated_tokens"].values())) == 1  # greedy: as many tokens by every method
    osd_spec = {r["method"]: r for r in per_file["rows"]}["osd.spec"]
    assert osd_spec["alpha"] > {r["method"]: r for r in single["rows"]}["osd.spec"]["alpha"]
    assert osd_spec["alpha"] > 0.5  # half the prompts (code's) accept every proposal
    assert per_file["draft"].endswith("drafts/{domain}")


def test_a_missing_domain_draft_names_its_folder(tmp_path):
    shutil.copytree(TINY_DRAFT_PATH, tmp_path / "drafts" / "sql")
    with pytest.raises(OSError, match="drafts/code"):
        run(tmp_path, "--data_drafts", str(tmp_path / "drafts" / "{domain}"))


@pytest.mark.slow
@pytest.mark.skipif(not packing_available(), reason="this CPU or torch build has no oneDNN bf16 packing")
def test_packed_linears_apply_to_every_method(tmp_path):
    bf16 = ["--draft", str(TINY_DRAFT_PATH), "--dtype", "bfloat16", "--draft_dtype", "bfloat16"]
    plain, packed = run(tmp_path, *bf16), run(tmp_path, *bf16, "--packed_linears")
    assert packed["packed_linears"] and not plain["packed_linears"]
    assert packed["generated_tokens"] == plain["generated_tokens"]  # the same products: the same outputs

    def alpha(result: dict) -> float:  # at the fixed gamma ("gamma auto" chooses by the measured step times)
        return {r["method"]: r["alpha"] for r in result["rows"]}["osd.spec"]

    assert alpha(packed) == alpha(plain)


def test_packed_linears_refuse_a_float32_target(tmp_path, capsys):
    with pytest.raises(SystemExit):
        run(tmp_path, "--packed_linears")  # run() serves a float32 target
    assert "--packed_linears packs bf16 weights" in capsys.readouterr().err


@pytest.mark.slow
def test_a_head_serves_the_same_prompts_beside_the_draft(tmp_path):
    teacher = AutoModelForCausalLM.from_pretrained(TINY_TEACHER_PATH, dtype=torch.float32)
    save_head(distilled_head(teacher, vocab_size=1024, steps=40), tmp_path / "head")
    result = run(tmp_path, "--draft", str(TINY_DRAFT_PATH), "--head", str(tmp_path / "head"))
    rows = {r["method"]: r for r in result["rows"]}
    head, entry = rows["osd.spec, EAGLE-3 head"], result["head"]
    assert (
        entry["generated_tokens"] == result["generated_tokens"]["target_only"]
    )  # greedy: the target's tokens
    assert 0 <= head["alpha"] <= 1
    assert entry["path"].endswith("head") and 0 < entry["c"] != result["c"]  # the head's own step, timed
    assert head["speedup"] == pytest.approx(entry["measured_over_eq2"] * entry["eq2_predicted_speedup"])


@pytest.mark.slow
def test_profile_records_the_ops_of_one_generate(tmp_path):
    ops = run(tmp_path, "--draft", str(TINY_DRAFT_PATH), "--profile")["profile_top_ops"]
    assert 0 < len(ops) <= 15 and all(op["calls"] > 0 and op["self_cpu_ms"] >= 0 for op in ops)
    assert any(op["op"].startswith("aten::") for op in ops)  # torch's own ops, not only Python frames
    assert [op["self_cpu_ms"] for op in ops] == sorted((op["self_cpu_ms"] for op in ops), reverse=True)
