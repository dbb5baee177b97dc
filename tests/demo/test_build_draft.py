"""The demo builders (draft, head, T5 pair): seeded, and a run killed mid-way resumes to the same weights as an uninterrupted one."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer, T5ForConditionalGeneration

import osd.distill.lm_training as lm_training
from osd.demo.build_draft import DraftBuildConfig, build
from osd.demo.build_head import HeadBuildConfig
from osd.demo.build_head import build as build_head
from osd.model_checks import check_same_tokenizer
from osd.paths import DOMAINS, TINY_TEACHER_PATH, workload_path
from osd.spec.draft_vocab import count_tokens
from tests.builders.build_t5_pair import T5BuildConfig
from tests.builders.build_t5_pair import build as build_t5_pair


@pytest.fixture()
def small_workload(tmp_path):
    folder = tmp_path / "workload"
    folder.mkdir()
    for domain in DOMAINS:
        for split, n in (("train", 12), ("eval", 3)):
            records = json.loads(workload_path(domain, split).read_text())[:n]
            (folder / f"{domain}_{split}.json").write_text(json.dumps(records))
    return folder


GENERAL = [("How do I stay focused while studying?", "Take short breaks and keep your phone away."),
           ("Write a haiku about autumn.", "Red leaves drift and fall, the wind hums a quiet song."),
           ("What is a good name for a cat?", "Try Milo, Luna or Pepper."),
           ("Explain gravity simply.", "Mass pulls on mass: the Earth pulls you down.")]  # fmt: skip


def _general_corpus(folder) -> tuple[str, str]:
    """A four-record general corpus and its token counts (the tiny teacher's tokenizer) in `folder`."""
    corpus, counts = folder / "corpus.json", folder / "counts.json"
    corpus.write_text(json.dumps([{"id": f"g{i}", "conversation": [{"role": "user", "content": q},
                                                                 {"role": "assistant", "content": a}]}
                                  for i, (q, a) in enumerate(GENERAL)]))  # fmt: skip
    tok = AutoTokenizer.from_pretrained(TINY_TEACHER_PATH)
    found, _ = count_tokens([a for _, a in GENERAL], tok)
    counts.write_text(
        json.dumps({"num_tokens": sum(found.values()), "counts": [[t, c] for t, c in found.items()]})
    )
    return str(corpus), str(counts)


def _config(workload, out) -> DraftBuildConfig:
    """The tiny teacher stands in for the target."""
    corpus, counts = _general_corpus(out.parent)
    return DraftBuildConfig(out_dir=str(out), target=str(TINY_TEACHER_PATH), corpus=corpus, token_counts=counts,
                            workload_dir=str(workload), hidden=32, ffn=64, heads=2, max_positions=64, draft_vocab_size=24, top_k=4, max_length=48, steps=6, batch_size=2,
                            warmup_steps=2, teacher_batch_size=2, checkpoint_every=2, bf16_autocast=False)  # fmt: skip


def _head_config(workload, out) -> HeadBuildConfig:
    corpus, counts = _general_corpus(out.parent)
    return HeadBuildConfig(out_dir=str(out), target=str(TINY_TEACHER_PATH), corpus=corpus, token_counts=counts,
                           workload_dir=str(workload), draft_vocab_size=24, max_length=48, steps=6, batch_size=2,
                           warmup_steps=2, checkpoint_every=2, ttt_steps=2)  # fmt: skip


def _t5_config(workload, out) -> T5BuildConfig:
    return T5BuildConfig(out_dir=str(out), workload_dir=str(workload), teacher_layers=2, teacher_d_model=32,
                         teacher_d_ff=64, draft_d_model=16, draft_d_ff=32, heads=2, teacher_steps=4, draft_steps=2,
                         batch_size=2, warmup_steps=1, max_length=48, checkpoint_every=1,
                         bf16_autocast=False)  # fmt: skip


# (builder, config, weight files, checkpoint files): the decoder-only demo draft and the T5 pair
BUILDERS = {
    "draft": (build, _config, ["model.safetensors"], ["state.pt"]),
    "head": (build_head, _head_config, ["model.safetensors"], ["state.pt"]),
    "t5": (
        build_t5_pair,
        _t5_config,
        ["teacher/model.safetensors", "draft/model.safetensors"],
        ["teacher.pt"],
    ),
}


@pytest.mark.parametrize(
    "kind", [pytest.param(k, marks=pytest.mark.slow) if k == "t5" else k for k in sorted(BUILDERS)]
)
def test_killed_build_resumes_to_the_uninterrupted_weights(
    kind, small_workload, tmp_path, monkeypatch, capsys
):
    builder, config, weights, checkpoints = BUILDERS[kind]
    builder(config(small_workload, tmp_path / "whole"))
    whole = {f: load_file(tmp_path / "whole" / f) for f in weights}

    calls = {"n": 0}
    clip = torch.nn.utils.clip_grad_norm_

    def crash_at_step_3(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt("killed")
        return clip(*args, **kwargs)

    monkeypatch.setattr(lm_training.torch.nn.utils, "clip_grad_norm_", crash_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        builder(config(small_workload, tmp_path / "resumed"))
    assert not (tmp_path / "resumed").exists()  # nothing half-written where the models go
    for name in checkpoints:
        assert (tmp_path / "resumed.build" / name).exists()
    monkeypatch.setattr(lm_training.torch.nn.utils, "clip_grad_norm_", clip)
    builder(config(small_workload, tmp_path / "resumed"))
    assert "resuming from" in capsys.readouterr().out
    for f in weights:
        resumed = load_file(tmp_path / "resumed" / f)
        assert whole[f].keys() == resumed.keys()
        for name in resumed:
            torch.testing.assert_close(resumed[name], whole[f][name], rtol=0, atol=0)
    assert not (tmp_path / "resumed.build").exists()  # the checkpoints are removed once the models are saved
    metrics = json.loads((tmp_path / "resumed" / "build_metrics.json").read_text())
    if kind in ("draft", "head"):
        assert (
            metrics["overlap_with_workload"]["identical"] == 0
            and metrics["overlap_with_workload"]["corpus_queries"] == 4
        )
    if kind == "draft":
        assert metrics["parameters"] == sum(t.numel() for t in whole["model.safetensors"].values())
        assert len(json.loads((tmp_path / "resumed" / "config.json").read_text())["draft_vocab"]) == 24
    elif kind == "head":  # the d2t/t2d buffers are stored beside the parameters
        assert metrics["parameters"] + 24 + 3072 == sum(
            t.numel() for t in whole["model.safetensors"].values()
        )
        assert json.loads((tmp_path / "resumed" / "config.json").read_text())["draft_vocab_size"] == 24
    else:
        assert set(metrics["eval_answer_loss"]) == set(DOMAINS)


@pytest.mark.slow
def test_t5_pair_shares_one_tokenizer_without_a_chat_template(small_workload, tmp_path):
    cfg = _t5_config(small_workload, tmp_path / "t5")
    metrics = build_t5_pair(cfg)
    teacher, draft = (
        T5ForConditionalGeneration.from_pretrained(tmp_path / "t5" / n) for n in ("teacher", "draft")
    )
    assert teacher.dtype == draft.dtype == torch.bfloat16  # stored small
    tok = AutoTokenizer.from_pretrained(tmp_path / "t5" / "teacher")
    check_same_tokenizer(tmp_path / "t5" / "draft", tmp_path / "t5" / "teacher", tok)  # raises otherwise
    assert not tok.chat_template and teacher.config.decoder_start_token_id == tok.pad_token_id
    assert metrics["draft"]["parameters"] < metrics["teacher"]["parameters"]
    assert set(DOMAINS) < set(metrics["standard_alpha"])
    again = build_t5_pair(dataclasses.replace(cfg, evaluate_only=True))  # re-measures the saved pair
    assert again["eval_answer_loss"] == metrics["eval_answer_loss"] and again["draft"] == metrics["draft"]


def test_topk_distillation_is_the_soft_cross_entropy_renormalised_on_the_head():
    """Closed form on one position, a full head and a head over a subset of the stored entries;
    also under bf16 autocast (the build's setting), where float16 targets must still concatenate."""
    from osd.distill.teacher_topk import TopK, topk_distillation
    from osd.spec.draft_vocab import set_draft_vocab
    from tests.tiny_models import tiny_model

    model = tiny_model("llama", layers=1)
    ids, labels = [5, 6, 7], [-100, -100, 7]  # one loss position: logits at t = 1 predict token 7
    top = TopK(
        torch.tensor([[3, 9, 12]], dtype=torch.int32), torch.tensor([[-0.5, -1.5, -2.5]], dtype=torch.float16)
    )
    with torch.no_grad():
        log_q = torch.log_softmax(model(torch.tensor([ids])).logits[0, 1].float(), -1)
    p = torch.softmax(top.logp.float()[0], -1)
    loss, n = topk_distillation([(ids, labels)], [top])(model, [0])
    assert n == 1
    torch.testing.assert_close(loss, -(p * log_q[[3, 9, 12]]).sum())
    set_draft_vocab(model, [3, 12, 20])  # 9 lies outside the head: p renormalised on {3, 12}
    with torch.no_grad():
        log_q = torch.log_softmax(model(torch.tensor([ids])).logits[0, 1, [3, 12, 20]].float(), -1)
    p = torch.softmax(top.logp.float()[0, [0, 2]], -1)
    loss, _ = topk_distillation([(ids, labels)], [top])(model, [0])
    torch.testing.assert_close(loss, -(p * log_q[[0, 1]]).sum())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _ = topk_distillation([(ids, labels)], [top])(model, [0])
    assert torch.isfinite(loss)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_teacher_dtype_sets_the_dtype_the_top_k_is_computed_in(dtype, small_workload, tmp_path, monkeypatch):
    import osd.demo.build_draft as build_draft

    seen = []
    real = build_draft.teacher_topk

    def spy(target, *args, **kwargs):
        seen.append(target.dtype)
        return real(target, *args, **kwargs)

    monkeypatch.setattr(build_draft, "teacher_topk", spy)
    cfg = dataclasses.replace(_config(small_workload, tmp_path / "draft"), teacher_dtype=dtype, steps=1)
    metrics = build(cfg)
    assert seen == [getattr(torch, dtype)]
    assert metrics["config"]["teacher_dtype"] == dtype
