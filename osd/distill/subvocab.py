"""The student's sub-vocabulary head in training (`--draft_vocab_size`, `--draft_vocab_counts`,
`--draft_vocab_rows_only`).

The head itself, its save/load and its losses live in `osd.spec.draft_vocab`; this module decides,
from the flags and the student, which head a run trains, and how its tied weight learns.

--draft_vocab_rows_only. A draft whose head is tied to its input embedding shares one weight [V, H]
between them. Trained as it is, every step builds a dense [V, H] gradient and AdamW keeps [V, H]
moments, although the head reads only V' rows: for the demo draft (V = 49152, V' = 8192) most of an
update's memory traffic. `TiedRowsEmbedding` trains the V' rows as their own weight `rows` [V', H],
which the head and the embedding (for ids in V') read, and copies them into the shared weight after
every optimizer step; rows outside V' stay as they are (their ids are never proposed; they only feed
the draft when they appear in its context). Without such ids in the batches, the steps equal
those of the tied weight trained whole (tested). Checkpoints and saved models hold the shared weight
only: `rows` is dropped from the state dict and rebuilt from the weight when one is loaded.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from osd.distill.config import DistillTrainingArguments
from osd.spec.draft_vocab import (
    SubVocabHead,
    apply_draft_vocab,
    draft_vocab_ids,
    load_token_counts,
    select_token_ids,
    set_draft_vocab,
)

logger = logging.getLogger(__name__)


def student_draft_vocab(
    student: PreTrainedModel, args: DistillTrainingArguments, tokenizer: PreTrainedTokenizerBase | None
) -> torch.Tensor | None:
    """Install the student's head and return its token set [V'] (None: full vocabulary).

    A student saved with a head keeps it; `--draft_vocab_size` gives one to a student without, and
    must name the same size for a student that has one (a different set would change the model)."""
    apply_draft_vocab(student)
    current = draft_vocab_ids(student)
    if args.draft_vocab_size is None:
        return current
    if current is not None:
        if current.numel() != args.draft_vocab_size:
            raise ValueError(
                f"the student already has a sub-vocabulary head of {current.numel()} tokens (config.draft_vocab), "
                f"--draft_vocab_size asks for {args.draft_vocab_size}; drop the flag to keep its head"
            )
        return current
    counts = load_token_counts(args.draft_vocab_counts)
    vocab = student.config.vocab_size
    if (
        max(counts["counts"], default=-1) >= vocab
    ):  # ids of another tokenizer: the head would score other tokens
        raise ValueError(
            f"--draft_vocab_counts {args.draft_vocab_counts} counts token id {max(counts['counts'])}, beyond the "
            f"student's vocabulary of {vocab}: it was counted with another tokenizer ({counts.get('tokenizer')}); "
            "count the student's own (data/token_counts.py --tokenizer)"
        )
    always = tokenizer.all_special_ids if tokenizer is not None else []
    ids = select_token_ids(counts["counts"], args.draft_vocab_size, always)
    if len(ids) < args.draft_vocab_size:
        raise ValueError(
            f"--draft_vocab_size {args.draft_vocab_size}: --draft_vocab_counts {args.draft_vocab_counts} holds "
            f"{len(counts['counts'])} distinct tokens ({len(ids)} with the special ones), so the head would have "
            f"{len(ids)}; ask for at most {len(ids)}, or count more text (data/token_counts.py)"
        )
    set_draft_vocab(student, ids)
    covered = sum(counts["counts"].get(t, 0) for t in ids) / max(1, counts["num_tokens"])
    logger.info(
        "student head over %d tokens of %s (%.1f%% of its %d counted tokens)",
        len(ids), args.draft_vocab_counts, 100 * covered, counts["num_tokens"],
    )  # fmt: skip
    return draft_vocab_ids(student)


class TiedRowsEmbedding(nn.Module):
    """The input embedding of a student with a tied sub-vocabulary head, its V' rows trained as `rows`."""

    def __init__(self, embedding: nn.Embedding, head: SubVocabHead) -> None:
        super().__init__()
        self.weight = embedding.weight.requires_grad_(False)  # [V, H], shared with the head
        self.num_embeddings, self.embedding_dim = self.weight.shape
        self.padding_idx = embedding.padding_idx
        ids = head.token_ids
        self.rows = nn.Parameter(self.weight.detach().index_select(0, ids).clone())  # [V', H]
        slot = torch.full((self.num_embeddings,), -1, dtype=torch.long, device=ids.device)
        slot[ids] = torch.arange(ids.numel(), device=ids.device)
        self.register_buffer("slot", slot, persistent=False)  # [V]: the id's row in `rows`, -1 outside V'
        self.register_buffer("token_ids", ids.clone(), persistent=False)  # [V']
        head.trained_rows = (self.rows,)
        self._register_state_dict_hook(_drop_rows)
        self._register_load_state_dict_pre_hook(self._rows_from_weight)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_ids [...] -> [..., H]; without grad (serving), the shared weight, which mirrors `rows`."""
        if not (torch.is_grad_enabled() and self.rows.requires_grad):
            return F.embedding(input_ids, self.weight, self.padding_idx)
        slot = self.slot[input_ids]
        # a sparse gradient (the looked-up rows only), which autograd adds into the head's dense one: no dense
        # [V', H] gradient is built, zeroed and summed at every step
        trained = F.embedding(slot.clamp(min=0), self.rows, sparse=True)
        return torch.where((slot >= 0).unsqueeze(-1), trained, F.embedding(input_ids, self.weight))

    @torch.no_grad()
    def write_back(self, weight: torch.Tensor | None = None) -> None:
        """Copy `rows` into the shared weight (after every optimizer step), or into `weight` [V, H] (a serving
        copy's, which only these rows of the frozen weight distinguish from it)."""
        weight = self.weight if weight is None else weight
        weight.index_copy_(0, self.token_ids, self.rows.to(weight.dtype))

    def _rows_from_weight(self, state_dict: dict, prefix: str, *args) -> None:
        weight = state_dict.get(prefix + "weight")
        if weight is not None and prefix + "rows" not in state_dict:
            state_dict[prefix + "rows"] = weight.index_select(0, self.token_ids.to(weight.device))


def _drop_rows(module: nn.Module, state_dict: dict, prefix: str, local_metadata: dict) -> None:
    state_dict.pop(prefix + "rows", None)


def has_tied_draft_vocab(model: PreTrainedModel) -> bool:
    """Whether `model` has (or was saved with) a sub-vocabulary head tied to its input embedding."""
    head, embedding = model.get_output_embeddings(), model.get_input_embeddings()
    tied = head is not None and head.weight is embedding.weight
    return tied and draft_vocab_ids(model) is not None


def train_tied_rows_only(student: PreTrainedModel) -> TiedRowsEmbedding:
    """Install `TiedRowsEmbedding` (--draft_vocab_rows_only); the caller writes back after each step."""
    head, embedding = student.get_output_embeddings(), student.get_input_embeddings()
    if not isinstance(head, SubVocabHead):
        raise ValueError(
            "--draft_vocab_rows_only needs a student with a sub-vocabulary head (--draft_vocab_size)"
        )
    if not isinstance(embedding, nn.Embedding) or head.weight is not embedding.weight:
        raise ValueError(
            "--draft_vocab_rows_only needs a student whose LM head is tied to its input embedding "
            f"({type(student).__name__} has untied or custom ones)"
        )
    rows = TiedRowsEmbedding(embedding, head)
    student.set_input_embeddings(rows)
    return rows
