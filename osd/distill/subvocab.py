"""The student's sub-vocabulary head in training (`--draft_vocab_size`, `--draft_vocab_counts`).

The head itself, its save/load and its losses live in `osd.spec.draft_vocab`; this module decides,
from the flags and the student, which head a run trains.
"""

from __future__ import annotations

import logging

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from osd.distill.config import DistillTrainingArguments
from osd.spec.draft_vocab import (
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
    always = tokenizer.all_special_ids if tokenizer is not None else []
    ids = select_token_ids(counts["counts"], args.draft_vocab_size, always)
    set_draft_vocab(student, ids)
    covered = sum(counts["counts"].get(t, 0) for t in ids) / max(1, counts["num_tokens"])
    logger.info(
        "student head over %d tokens of %s (%.1f%% of its %d counted tokens)",
        len(ids), args.draft_vocab_counts, 100 * covered, counts["num_tokens"],
    )  # fmt: skip
    return draft_vocab_ids(student)
