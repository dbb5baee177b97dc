"""Training a student with a sub-vocabulary head (--draft_vocab_size, --draft_vocab_counts)."""

from __future__ import annotations

import json

import pytest
import torch
from online_fixtures import VOCAB, make_pair, make_trainer, tied_subvocab_pair, write_stream
from transformers import AutoModelForCausalLM

from osd.distill.config import DistillTrainingArguments
from osd.spec.draft_vocab import SubVocabHead, draft_vocab_ids

pytestmark = pytest.mark.usefixtures("one_thread")
SIZE = 24


def counts_file(tmp_path) -> str:
    """Frequencies that favour the ids 10..33 (the tokenizer's special ids 0..3 are always kept)."""
    path = tmp_path / "counts.json"
    counts = [[i, 100 - i] for i in range(10, 10 + SIZE)] + [[i, 1] for i in range(40, len(VOCAB))]
    path.write_text(
        json.dumps({"tokenizer": "test", "num_tokens": sum(c for _, c in counts), "counts": counts})
    )
    return str(path)


@pytest.mark.parametrize("mode", ["online", "offline"])
def test_only_the_chosen_rows_learn_and_the_head_is_saved(tmp_path, mode):
    draft, target = make_pair()
    head_before = draft.lm_head.weight.detach().clone()  # untied head: rows outside V' must not move
    stream = write_stream(tmp_path / "stream.json", 4)
    extra = (
        {"max_steps": 2, "per_device_train_batch_size": 2, "sample_source": "teacher"}
        if mode == "offline"
        else {}
    )
    trainer = make_trainer(tmp_path, stream, draft, target, mode=mode, draft_vocab_size=SIZE,
                           draft_vocab_counts=counts_file(tmp_path), **extra)  # fmt: skip
    ids = draft_vocab_ids(draft).tolist()
    assert ids == sorted(
        set(range(4)) | set(range(10, 10 + SIZE - 4))
    )  # special ids first, then the most frequent
    trainer.train()
    moved = (draft.lm_head.weight.detach() != head_before).any(-1)  # [V]
    assert moved[ids].any()
    outside = torch.ones(len(VOCAB), dtype=torch.bool)
    outside[ids] = False
    assert not moved[outside].any()
    trainer.save_model(str(tmp_path / "saved"))
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "saved")
    assert saved.config.draft_vocab == ids


def test_a_student_saved_with_a_head_keeps_it_and_refuses_another_size(tmp_path):
    draft, target = make_pair()
    stream = write_stream(tmp_path / "stream.json", 2)
    make_trainer(
        tmp_path, stream, draft, target, draft_vocab_size=SIZE, draft_vocab_counts=counts_file(tmp_path)
    )
    draft.save_pretrained(tmp_path / "student")
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "student")
    make_trainer(tmp_path, stream, reloaded, target)  # no flag: the saved head
    assert isinstance(reloaded.get_output_embeddings(), SubVocabHead)
    with pytest.raises(ValueError, match=f"already has a sub-vocabulary head of {SIZE} tokens"):
        make_trainer(tmp_path, stream, reloaded, target, draft_vocab_size=SIZE + 1,
                     draft_vocab_counts=counts_file(tmp_path))  # fmt: skip


def test_the_two_flags_go_together(tmp_path):
    draft, target = make_pair()
    stream = write_stream(tmp_path / "stream.json", 2)
    with pytest.raises(ValueError, match="--draft_vocab_size and --draft_vocab_counts go together"):
        make_trainer(tmp_path, stream, draft, target, draft_vocab_size=SIZE)


def test_a_size_beyond_the_counted_tokens_is_refused_naming_the_flag_and_the_file(tmp_path):
    """Issue 49: --draft_vocab_size 5000 over a counts file of 36 tokens built a 36-token head (INFO only)."""
    draft, target = make_pair()
    stream = write_stream(tmp_path / "stream.json", 2)
    counts = counts_file(tmp_path)  # 24 + 24 counted ids and the 4 special ones: 52 at most
    with pytest.raises(ValueError, match=rf"--draft_vocab_size 60: --draft_vocab_counts {counts} holds 48 "):
        make_trainer(tmp_path, stream, draft, target, draft_vocab_size=60, draft_vocab_counts=counts)
    assert draft_vocab_ids(draft) is None  # no head installed
    make_trainer(tmp_path, stream, draft, target, draft_vocab_size=52, draft_vocab_counts=counts)
    assert draft_vocab_ids(draft).numel() == 52


# ---- --draft_vocab_rows_only ----------------------------------------------------------------------


@pytest.mark.parametrize("background", [False, True])
def test_rows_only_steps_equal_the_whole_tied_weights_when_the_head_covers_the_vocabulary(
    tmp_path, background
):
    """With every id in V', no row is left out: the run must equal training the shared weight whole."""
    stream = write_stream(tmp_path / "stream.json", 4)
    runs = {}
    for rows_only in (False, True):
        draft, target = tied_subvocab_pair(range(len(VOCAB)))
        before = draft.state_dict()["model.embed_tokens.weight"].clone()
        trainer = make_trainer(tmp_path / str(rows_only), stream, draft, target, online_loss_positions="all",
                               online_background_update=background, draft_vocab_rows_only=rows_only)  # fmt: skip
        trainer.train()
        runs[rows_only] = draft.state_dict()
    assert set(runs[True]) == set(runs[False])  # the trained rows are not saved
    assert not torch.allclose(runs[True]["model.embed_tokens.weight"], before, atol=1e-3)  # it did learn
    torch.testing.assert_close(runs[True], runs[False])


@pytest.mark.parametrize("mode", ["online", "offline"])
def test_rows_only_trains_the_heads_rows_keeps_the_others_and_saves_a_plain_model(tmp_path, mode):
    draft, target = tied_subvocab_pair(range(0, len(VOCAB), 2))
    weight = draft.get_input_embeddings().weight
    before = weight.detach().clone()
    stream = write_stream(tmp_path / "stream.json", 4)
    extra = (
        {"max_steps": 2, "per_device_train_batch_size": 2, "sample_source": "teacher"}
        if mode == "offline"
        else {"online_loss_positions": "all"}
    )
    trainer = make_trainer(tmp_path, stream, draft, target, mode=mode, draft_vocab_rows_only=True, **extra)
    trainer.train()
    ids = draft_vocab_ids(draft)
    assert draft.get_output_embeddings().weight is weight  # still one weight
    moved = (weight.detach() != before).any(-1)  # [V]
    outside = torch.ones(len(VOCAB), dtype=torch.bool)
    outside[ids] = False
    assert moved[ids].all() and not moved[outside].any()
    torch.testing.assert_close(weight.detach()[ids], trainer.tied_rows.rows.detach(), rtol=0, atol=0)
    trained = [p for group in trainer.optimizer.param_groups for p in group["params"]]
    assert all(p is not weight for p in trained) and any(p is trainer.tied_rows.rows for p in trained)
    trainer.save_model(str(tmp_path / "saved"))
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "saved")
    assert saved.config.draft_vocab == ids.tolist() and not any("rows" in k for k in saved.state_dict())
    torch.testing.assert_close(saved.get_input_embeddings().weight, weight.detach())


def test_rows_only_serving_copy_reloads_the_written_back_rows(tmp_path):
    """A background update's serving copy reloads only what changes (the trained parameters, the frozen tied
    weight's V' rows): after the updates it must still equal the draft, cast."""
    from osd.online.loop import SHARED_DRAFT

    draft, target = tied_subvocab_pair(range(0, len(VOCAB), 2))
    before = draft.get_input_embeddings().weight.detach().clone()
    stream = write_stream(tmp_path / "stream.json", 6)
    trainer = make_trainer(tmp_path, stream, draft, target, online_loss_positions="all", online_update_interval=1,
                           online_background_update=True, draft_serving_dtype="bfloat16",
                           draft_vocab_rows_only=True)  # fmt: skip
    trainer.train()
    updater = trainer.loop.updater
    assert updater.state.updates >= 4 and not torch.equal(draft.get_input_embeddings().weight, before)
    served = updater.serving(SHARED_DRAFT).state_dict()
    for name, weight in draft.state_dict().items():
        assert torch.equal(served[name], weight.to(torch.bfloat16)), name


def test_rows_only_refuses_a_student_it_cannot_train(tmp_path):
    stream = write_stream(tmp_path / "stream.json", 2)
    draft, target = make_pair()  # full, untied head
    with pytest.raises(ValueError, match="sub-vocabulary head"):
        make_trainer(tmp_path / "full", stream, draft, target, draft_vocab_rows_only=True)
    with pytest.raises(ValueError, match="tied"):
        make_trainer(tmp_path / "untied", stream, draft, target, draft_vocab_size=SIZE,
                     draft_vocab_counts=counts_file(tmp_path), draft_vocab_rows_only=True)  # fmt: skip
    with pytest.raises(ValueError, match="choose one"):
        DistillTrainingArguments(output_dir=str(tmp_path), draft_vocab_rows_only=True, freeze_embeddings=True)


def test_counts_of_another_tokenizer_are_refused_naming_the_file(tmp_path):
    """Issue 49, rule 2: a counts file and the student must share a tokenizer; ids beyond its vocabulary give
    a one-line error naming the file and the tokenizer it was counted with."""
    draft, target = make_pair()
    stream = write_stream(tmp_path / "stream.json", 2)
    path = tmp_path / "other.json"
    path.write_text(
        json.dumps({"tokenizer": "another/model", "num_tokens": 3, "counts": [[5, 2], [len(VOCAB) + 7, 1]]})
    )
    with pytest.raises(
        ValueError, match=rf"--draft_vocab_counts {path} counts token id {len(VOCAB) + 7}, .*another/model"
    ):
        make_trainer(tmp_path, stream, draft, target, draft_vocab_size=4, draft_vocab_counts=str(path))
    assert draft_vocab_ids(draft) is None
