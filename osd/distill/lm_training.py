"""Language-model pre-training for the demo models: one loop, seeded, resumable after a kill.

The batch order is a pure function of (seed, name, step): epoch e visits the examples in the
permutation `Random(f"{seed}-{name}-{e}")`, so a run restarted from a checkpoint at step s sees
exactly the batches s, s+1, ... that the uninterrupted run would have seen. The checkpoint
(model, optimizer, step, running statistics) is written to a temporary file and renamed, so a
kill at any moment leaves either the previous checkpoint or the new one, never a torn file.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from osd.conversations import assistant_answer, user_query
from osd.distill.data import ConversationDataset
from osd.prompting import encode_answer, encode_prompt

IGNORE = -100
Example = tuple[list[int], list[int]]  # (input ids, labels with IGNORE where no loss is taken)
# (model, indices) -> (loss, tokens); a loss without grad_fn was back-propagated by the BatchLoss itself
BatchLoss = Callable[[PreTrainedModel, list[int]], tuple[torch.Tensor, int]]


def chat_example(tok: PreTrainedTokenizerBase, record: dict, max_length: int) -> Example:
    """(ids, labels): chat-template prompt + answer + EOS, loss on the answer only."""
    prompt, answer = (
        encode_prompt(tok, user_query(record)),
        encode_answer(tok, assistant_answer(record) or ""),
    )
    return (prompt + answer)[:max_length], ([IGNORE] * len(prompt) + answer)[:max_length]


def seq2seq_example(dataset: ConversationDataset, index: int) -> Example:
    """(encoder ids, decoder labels) of an encoder-decoder dataset's record: exactly what the trainer feeds."""
    item = dataset[index]
    return item["input_ids"], item["labels"]


def collate(batch: list[Example], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad ids and labels each to their longest; pads get label IGNORE and attention 0.

    Decoder-only examples have labels as long as the ids (T = Td); seq2seq examples (encoder ids,
    decoder labels) do not, and the model builds its decoder input from the labels."""
    width = max(len(ids) for ids, _ in batch)
    ids = torch.full((len(batch), width), pad_id)  # [B, T]
    labels = torch.full((len(batch), max(len(y) for _, y in batch)), IGNORE)  # [B, Td]
    mask = torch.zeros((len(batch), width), dtype=torch.long)  # [B, T]
    for i, (x, y) in enumerate(batch):
        ids[i, : len(x)], labels[i, : len(y)], mask[i, : len(x)] = torch.tensor(x), torch.tensor(y), 1
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}


def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    """Linear warmup to `peak`, then cosine decay to 10% of it."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def batch_indices(num_examples: int, batch_size: int, step: int, seed: int, name: str) -> list[int]:
    """Example indices of batch `step`: consecutive slices of seeded per-epoch permutations."""
    out = []
    for pos in range(step * batch_size, (step + 1) * batch_size):
        epoch, offset = divmod(pos, num_examples)
        out.append(_permutation(num_examples, seed, name, epoch)[offset])
    return out


_PERMUTATIONS: dict[tuple[int, int, str, int], list[int]] = {}


def _permutation(n: int, seed: int, name: str, epoch: int) -> list[int]:
    key = (n, seed, name, epoch)
    if key not in _PERMUTATIONS:
        _PERMUTATIONS[key] = random.Random(f"{seed}-{name}-{epoch}").sample(range(n), n)
    return _PERMUTATIONS[key]


def save_atomically(obj: object, path: Path) -> None:
    """torch.save to `path.tmp`, then rename: readers see the old file or the new one, never half."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def train_lm(
    model: PreTrainedModel,
    examples: list[Example],
    steps: int,
    batch_size: int,
    lr: float,
    warmup_steps: int,
    seed: int,
    name: str,
    checkpoint: Path | None = None,
    checkpoint_every: int = 50,
    bf16_autocast: bool = False,
    batch_loss: BatchLoss | None = None,
    log_every: int = 25,
) -> dict[str, float]:
    """AdamW over seeded shuffled epochs; resumes from `checkpoint` when it exists.

    bf16_autocast: float32 weights and optimizer, bf16 matmuls (about 1.5x faster on CPUs with
    AVX512-BF16 or AMX; the loss is still computed in float32 by the model).
    batch_loss: (model, example indices of the batch) -> (loss, tokens it covers); default: the
    model's cross-entropy on the collated `examples`. A batch_loss may back-propagate its loss itself (part by
    part, to bound memory) and return it detached.

    Returns the mean loss of the last 50 steps, the tokens seen and the wall time of this run.
    """
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    start_step, recent, tokens = 0, [], 0
    if checkpoint is not None and checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start_step, recent, tokens = state["step"], state["recent"], state["tokens"]
        print(f"[{name}] resuming from {checkpoint} at step {start_step}/{steps}", flush=True)
    model.train()
    start = time.time()
    for step in range(start_step, steps):
        indices = batch_indices(len(examples), batch_size, step, seed, name)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr, warmup_steps)
        with torch.autocast(model.device.type, dtype=torch.bfloat16, enabled=bf16_autocast):
            loss, batch_tokens = (batch_loss or _cross_entropy(examples))(model, indices)
        if loss.requires_grad:
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        tokens += batch_tokens
        recent = (recent + [loss.item()])[-50:]
        done = step + 1
        if step % log_every == 0 or done == steps:
            print(f"[{name}] step {done}/{steps} loss {sum(recent) / len(recent):.3f} tokens {tokens} "
                  f"({(done - start_step) / (time.time() - start):.2f} steps/s)", flush=True)  # fmt: skip
        if checkpoint is not None and (done % checkpoint_every == 0 or done == steps):
            state = {"step": done, "model": model.state_dict(), "optimizer": opt.state_dict()}
            save_atomically(state | {"recent": recent, "tokens": tokens}, checkpoint)
    model.eval()
    return {
        "final_train_loss": sum(recent) / max(len(recent), 1),
        "train_tokens": tokens,
        "train_seconds_this_run": time.time() - start,
    }


def _cross_entropy(examples: list[Example]) -> BatchLoss:
    def loss(model: PreTrainedModel, indices: list[int]) -> tuple[torch.Tensor, int]:
        batch = collate([examples[i] for i in indices], model.config.pad_token_id)
        return model(**batch).loss, int(batch["attention_mask"].sum())

    return loss


@torch.inference_mode()
def eval_loss(model: PreTrainedModel, examples: list[Example], batch_size: int = 16) -> float:
    """Mean cross-entropy per label token (decoder-only or seq2seq examples, as `collate`)."""
    total, count = 0.0, 0
    for i in range(0, len(examples), batch_size):
        batch = collate(examples[i : i + batch_size], model.config.pad_token_id)
        if model.config.is_encoder_decoder:  # decoder logits at t predict labels[t]
            logits = model(**batch).logits  # [B, Td, V]
            labels = batch["labels"]  # [B, Td]
        else:  # logits at t predict token t + 1
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            logits, labels = logits[:, :-1], batch["labels"][:, 1:]  # [B, T-1, V], [B, T-1]
        nll = torch.nn.functional.cross_entropy(
            logits.float().transpose(1, 2), labels, ignore_index=IGNORE, reduction="sum"
        )
        total, count = total + nll.item(), count + int((labels != IGNORE).sum())
    return total / count


def num_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
