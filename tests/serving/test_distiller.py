"""osd.serving.distiller on the committed tiny pair: the buffer's target logits, the update, the export."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from osd.online.buffer import distillation_loss
from osd.online.config import OnlineArguments
from osd.online.loop import SHARED_DRAFT
from osd.online.records import OnlineState
from osd.paths import TINY_DRAFT_PATH, TINY_TEACHER_PATH
from osd.serving.config import ServingArguments
from osd.serving.distiller import DraftDistiller, export_draft
from osd.spec.draft_vocab import SubVocabHead, set_draft_vocab
from osd.spec.eagle3 import Eagle3Head, save_head

PROMPT, GENERATED = [1, 40, 41, 42, 43], [50, 51, 52, 53, 54, 55]


def update(distiller: DraftDistiller, buffer: list, steps: int = 1) -> float | None:
    """One update of the online loop's updater on `buffer` (the distiller's AdamW keeps its state)."""
    config = OnlineArguments(online_update_interval=len(buffer), online_steps_per_update=steps)
    updater = distiller.updater(config, OnlineState())
    for query in buffer:
        updater.add(SHARED_DRAFT, query)
    loss = updater.update_due()
    return None if loss is None else loss.item()


@pytest.fixture
def distiller() -> DraftDistiller:
    torch.manual_seed(0)
    draft = AutoModelForCausalLM.from_pretrained(TINY_DRAFT_PATH)
    target = AutoModelForCausalLM.from_pretrained(TINY_TEACHER_PATH)
    return DraftDistiller(draft, target, "forward", learning_rate=1e-3)


def test_buffered_target_logits_are_the_teacher_forced_forward(distiller) -> None:
    query = distiller.buffer(PROMPT, GENERATED, [0, 3, 5])
    with torch.no_grad():
        full = distiller.target(torch.tensor([PROMPT + GENERATED])).logits[0]  # [T + N, V]
    # generated token i is predicted by the logits at T + i - 1: an off-by-one would compare other rows
    expected = full[[len(PROMPT) - 1 + i for i in (0, 3, 5)]]
    torch.testing.assert_close(query.target_logits.float(), expected, atol=2e-2, rtol=1e-3)


def test_updates_lower_the_loss_and_leave_the_target_alone(distiller) -> None:
    buffer = [distiller.buffer(PROMPT, GENERATED, [0, 1, 2, 3, 4, 5])]
    target_before = {k: v.clone() for k, v in distiller.target.state_dict().items()}
    with torch.no_grad():
        before = distillation_loss(distiller.draft, buffer, distiller.divergence).item()
    losses = [update(distiller, buffer) for _ in range(5)]
    with torch.no_grad():
        after = distillation_loss(distiller.draft, buffer, distiller.divergence).item()
    assert losses[0] == pytest.approx(before, rel=1e-4) and after < before - 0.1, (before, losses, after)
    for name, value in distiller.target.state_dict().items():
        assert torch.equal(value, target_before[name]), name


def test_a_buffer_without_loss_positions_changes_nothing(distiller) -> None:
    before = {k: v.clone() for k, v in distiller.draft.state_dict().items()}
    assert update(distiller, [distiller.buffer(PROMPT, GENERATED, [])]) is None
    for name, value in distiller.draft.state_dict().items():
        assert torch.equal(value, before[name]), name


def test_export_writes_each_weight_once_in_the_served_dtype(distiller, tmp_path) -> None:
    # the tiny draft is untied; tie it as the demo draft is, so one weight has two names
    distiller.draft.lm_head.weight = distiller.draft.model.embed_tokens.weight
    export_draft(distiller.draft, tmp_path / "draft.safetensors", torch.bfloat16)
    weights = load_file(tmp_path / "draft.safetensors")
    assert "model.embed_tokens.weight" in weights and "lm_head.weight" not in weights
    assert {t.dtype for t in weights.values()} == {torch.bfloat16}
    params = dict(distiller.draft.named_parameters())  # named_parameters lists a shared weight once
    assert sorted(weights) == sorted(params)
    for name, value in weights.items():
        torch.testing.assert_close(value, params[name].detach().to(torch.bfloat16), atol=0, rtol=0)


def test_steps_per_update_equals_that_many_single_step_updates() -> None:
    """steps_per_update 3: one update moves the draft as three one-step updates on the same buffer do."""
    target = AutoModelForCausalLM.from_pretrained(TINY_TEACHER_PATH)
    one, three = (
        DraftDistiller(
            AutoModelForCausalLM.from_pretrained(TINY_DRAFT_PATH), target, "forward", learning_rate=1e-3
        )
        for _ in range(2)
    )
    buffer = [one.buffer(PROMPT, GENERATED, [0, 1, 2, 3, 4, 5])]
    last = [update(one, buffer) for _ in range(3)][-1]
    assert update(three, buffer, steps=3) == pytest.approx(last, rel=1e-5)
    torch.testing.assert_close(three.draft.state_dict(), one.draft.state_dict())
    start = AutoModelForCausalLM.from_pretrained(TINY_DRAFT_PATH).state_dict()
    assert any(not torch.equal(v, start[k]) for k, v in three.draft.state_dict().items())  # it did move


def test_a_subvocab_draft_trains_on_its_tokens(tmp_path) -> None:
    """A draft saved with a head over V' (every other token) keeps it in the distiller, and its loss is
    the forward KL, on V', of the target's distribution renormalised there (closed form)."""
    draft = AutoModelForCausalLM.from_pretrained(TINY_DRAFT_PATH)
    ids = torch.arange(0, draft.config.vocab_size, 2)  # [V']
    set_draft_vocab(draft, ids)
    draft.save_pretrained(tmp_path / "draft")
    target = AutoModelForCausalLM.from_pretrained(TINY_TEACHER_PATH)
    distiller = DraftDistiller(AutoModelForCausalLM.from_pretrained(tmp_path / "draft"), target, "forward")
    assert isinstance(distiller.draft.get_output_embeddings(), SubVocabHead)
    positions = [0, 2, 4]
    query = distiller.buffer(PROMPT, GENERATED, positions)
    with torch.no_grad():
        loss = distillation_loss(distiller.draft, [query], distiller.divergence).item()
        seq = torch.tensor([PROMPT + GENERATED[:-1]])
        rows = [len(PROMPT) - 1 + i for i in positions]
        log_q = torch.log_softmax(distiller.draft(seq).logits[0, rows][:, ids].float(), -1)  # [W, V']
        log_p = torch.log_softmax(query.target_logits[:, ids].float(), -1)  # [W, V']
    expected = (log_p.exp() * (log_p - log_q)).sum(-1).mean().item()
    assert loss == pytest.approx(expected, rel=1e-4)


def test_from_args_distils_the_drafter_the_flags_name(tmp_path) -> None:
    """`DraftDistiller.from_args` (osd.serving's and bench_vllm's): --drafter head, the head at --head_path in
    float32; otherwise the draft model at --student_model_path, with its sub-vocabulary head installed."""
    target = AutoModelForCausalLM.from_pretrained(TINY_TEACHER_PATH)
    head = Eagle3Head.for_target(target, seed=3)
    save_head(head, tmp_path / "head", target)
    flags = {"data_path": "stream.json", "output_dir": str(tmp_path / "out"), "student_model_path": str(TINY_DRAFT_PATH),
             "teacher_model_path": str(TINY_TEACHER_PATH)}  # fmt: skip
    args = ServingArguments(**flags, drafter="head", head_path=str(tmp_path / "head"))
    served = DraftDistiller.from_args(args, target).draft
    assert isinstance(served, Eagle3Head) and served.fc.weight.dtype == torch.float32
    torch.testing.assert_close(served.fc.weight, head.fc.weight)
    draft = DraftDistiller.from_args(ServingArguments(**flags), target).draft
    assert not isinstance(draft, Eagle3Head) and draft.dtype == torch.float32
