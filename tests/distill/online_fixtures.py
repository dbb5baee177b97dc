"""Builders for the online-distillation tests: a word-level tokenizer, a tiny random Llama pair (the
draft is the target plus noise, so it is wrong sometimes), a query stream and an online trainer."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from osd.distill.config import DistillTrainingArguments
from osd.distill.data import ConversationDataset, DistillCollator
from osd.distill.online import OnlineDistillTrainer
from osd.spec.draft_vocab import set_draft_vocab
from tests.tiny_models import draft_from_target, tiny_llama, tiny_tokenizer

WORDS = [f"w{i}" for i in range(60)]
VOCAB = ["<pad>", "<s>", "</s>", "<unk>"] + WORDS


def make_tokenizer() -> PreTrainedTokenizerFast:
    """VOCAB split on whitespace only, no special tokens added."""
    return tiny_tokenizer(VOCAB, split_punctuation=False, template=None)


def make_pair(noise: float = 0.6) -> tuple[LlamaForCausalLM, LlamaForCausalLM]:
    """(draft, target): the target's head is scaled by 8 (sharp logits: greedy ties are rare)."""
    target = tiny_llama(len(VOCAB), head_scale=8.0)
    return draft_from_target(target, noise), target


def tied_subvocab_pair(token_ids) -> tuple[LlamaForCausalLM, LlamaForCausalLM]:
    """(draft, target): a random draft whose head, tied to its input embedding, scores `token_ids` only."""
    draft = set_draft_vocab(tiny_llama(len(VOCAB), seed=1, tie_word_embeddings=True), token_ids)
    assert draft.get_output_embeddings().weight is draft.get_input_embeddings().weight
    return draft, tiny_llama(len(VOCAB), head_scale=8.0)


def write_stream(path: Path, n: int, datasets: tuple[str, ...] = ("a", "b")) -> str:
    """A conversation file of `n` one-turn queries of 6 random words, their datasets cycling through `datasets`."""
    gen = torch.Generator().manual_seed(2)
    records = []
    for i in range(n):
        words = " ".join(WORDS[j] for j in torch.randint(0, 60, (6,), generator=gen).tolist())
        records.append({"id": f"q{i}", "conversation": [{"role": "user", "content": words}],
                        "dataset": datasets[i % len(datasets)]})  # fmt: skip
    path.write_text(json.dumps(records))
    return str(path)


def make_trainer(tmp_path: Path, stream: str, draft, target, **overrides) -> OnlineDistillTrainer:
    """An online trainer of `draft` against `target` serving `stream` (gamma 3, 12 new tokens, an update
    every 2 queries, alpha logged per query) into tmp_path/run; `overrides` replace its arguments."""
    kwargs = dict(output_dir=str(tmp_path / "run"), mode="online", per_device_train_batch_size=1,
                  num_train_epochs=1, learning_rate=1e-2, lr_scheduler_type="constant", report_to="none",
                  eval_on_start=False, save_strategy="no", logging_steps=1000, use_cpu=True, seed=0,
                  max_new_tokens=12, max_propose_num=3, online_update_interval=2, online_eval_interval=1,
                  dataloader_pin_memory=False, disable_tqdm=True)  # fmt: skip
    kwargs.update(overrides)
    tokenizer = make_tokenizer()
    return OnlineDistillTrainer(
        model=draft,
        teacher_model=target,
        args=DistillTrainingArguments(**kwargs),
        train_dataset=ConversationDataset(stream, tokenizer, model_max_length=64),
        data_collator=DistillCollator(tokenizer.pad_token_id),
        processing_class=tokenizer,
    )
