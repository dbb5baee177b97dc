"""What the engine drafts with: a separate draft model, or an EAGLE-3 head over the target's hidden states.

    SpeculativeDecoder(drafter, target, gamma)    # drafter: a PreTrainedModel or an Eagle3Head

A `Drafter` is an `nn.Module` either way, so the online updater trains either kind through its loss
(`osd.online.buffer.distillation_loss` for a draft model, `osd.online.head_loss.head_distillation_loss` for a head).
The engine meets a drafter through its cache (`DraftCache`: read committed tokens, propose from them, crop), made
here for one sequence (`sequence_cache`) or a batch's rows (`row_cache`). A head also reads the target's input states
at its `target_layers`, which the target's verification pass keeps (`target_layers`; none for a draft model) and
hands to the head's cache after each step (`osd.spec.head_cache`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from osd.spec.batched import RowCache
from osd.spec.draft_vocab import apply_draft_vocab
from osd.spec.eagle3 import Eagle3Head, load_head, save_head
from osd.spec.head_cache import HeadRows, HeadSequence
from osd.spec.lean_llama import draft_cache, prepare_lean_step

Drafter = PreTrainedModel | Eagle3Head


class DraftCache(Protocol):
    """A drafter's state over one committed sequence (`CachedModel`, `LeanLlamaCache`, `HeadSequence`)."""

    @property
    def device(self) -> torch.device: ...

    def __len__(self) -> int:
        """Committed tokens it has read."""

    def forward(self, tokens: torch.Tensor, num_logits: int) -> torch.Tensor:
        """Read tokens [1, n] after the cached ones; logits of the last num_logits [num_logits, V]."""

    def crop(self, length: int) -> None:
        """Keep what read the first `length` committed tokens."""


def target_layers(drafter: Drafter) -> tuple[int, ...]:
    """The target's decoder layers whose input states the drafter reads (none for a draft model)."""
    return drafter.target_layers if isinstance(drafter, Eagle3Head) else ()


def sequence_cache(
    drafter: Drafter,
    target: PreTrainedModel,
    encoder_input_ids: torch.Tensor | None,
    lean: bool,
    reuse_prompt: bool = True,
) -> DraftCache:
    """The drafter's cache for one sequence (`generate`); lean: a Llama draft's lean step where it applies
    (reuse_prompt: as `osd.spec.lean_llama.LeanLlamaCache`'s)."""
    if isinstance(drafter, Eagle3Head):
        return HeadSequence(drafter, target.get_input_embeddings())
    return draft_cache(drafter, encoder_input_ids, lean, reuse_prompt)


def row_cache(
    drafter: Drafter, target: PreTrainedModel, input_ids: torch.Tensor, mask: torch.Tensor, lean: bool
) -> RowCache:
    """The drafter's cache for B left-padded rows input_ids [B, T] (`generate_batch`)."""
    if isinstance(drafter, Eagle3Head):
        return HeadRows.begin(drafter, target.get_input_embeddings(), input_ids.shape[0])
    return RowCache.start(drafter, input_ids, mask, lean=lean)


def prepare_for_serving(drafter: Drafter) -> None:
    """Derive now what the engine's step derives from the drafter's weights at its first use (a draft model's
    lean-step weights; a head derives nothing), e.g. in the online updater's worker after a refresh."""
    if not isinstance(drafter, Eagle3Head):
        prepare_lean_step(drafter)


def save_drafter(drafter: Drafter, path: str | Path) -> None:
    """Write `drafter` as its kind loads: a draft model's `save_pretrained`, a head's speculators folder."""
    if isinstance(drafter, Eagle3Head):
        save_head(drafter, path)
    else:
        drafter.save_pretrained(path)


def load_drafter(path: str | Path, dtype: torch.dtype) -> Drafter:
    """A drafter folder as `save_drafter` writes it, in `dtype`: a speculators-format EAGLE-3 head (its config's
    `speculators_model_type`), else a draft model with its saved sub-vocabulary head installed, as the engine
    steps it."""
    config = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    if config.get("speculators_model_type") == "eagle3":
        return load_head(path).to(dtype)
    return apply_draft_vocab(AutoModelForCausalLM.from_pretrained(path, dtype=dtype)).eval()
