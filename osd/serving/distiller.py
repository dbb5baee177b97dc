"""The trainer side of `osd.serving`: the drafter being distilled (a draft model or an EAGLE-3 head), the target
as its teacher, and the export.

Symbols: T prompt length, N generated tokens, W loss positions of a query, V vocabulary.

vLLM keeps no target logits (nor states) for us, so `buffer` gets them from one teacher-forced forward of the
target (an HF model on --trainer_device) over prompt + generated tokens: for a draft model its logits at the loss
positions only (`logits_to_keep`); for a head also its states at the head's layers
(`osd.online.buffer.teacher_forced_feature_query`). The update is the online loop's
(`osd.online.updater.DraftUpdater`) with this module's loss (the --kl_method divergence, on V' for a sub-vocabulary
head; a head's is EAGLE-3's training-time test, `osd.online.head_loss`) and a plain AdamW step.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import PreTrainedModel

from osd.distill.losses import get_divergence
from osd.models import load_head_drafter, load_model
from osd.online.buffer import (
    BufferedQuery,
    distillation_loss,
    logits_at,
    stored_logits,
    teacher_forced_feature_query,
)
from osd.online.config import OnlineArguments
from osd.online.head_loss import FeatureQuery, head_distillation_loss
from osd.online.loop import SHARED_DRAFT
from osd.online.records import OnlineState
from osd.online.updater import DraftUpdater, adamw_step
from osd.serving.config import ServingArguments
from osd.spec.draft_vocab import apply_draft_vocab, draft_vocab_ids, restrict_divergence
from osd.spec.eagle3 import Eagle3Head, head_weights


class DraftDistiller:
    """The drafter being distilled (trained in its own dtype), the target as teacher, AdamW."""

    def __init__(
        self,
        draft: PreTrainedModel | Eagle3Head,
        target: PreTrainedModel,
        kl_method: str = "forward",
        learning_rate: float = 1e-4,
        weight_decay: float = 0.0,
        max_grad_norm: float = 0.0,
        temperature: float = 1.0,
        jsd_beta: float = 0.5,
    ) -> None:
        self.target = target.eval()
        self.divergence = get_divergence(kl_method, jsd_beta)
        if isinstance(draft, Eagle3Head):  # its loss restricts the divergence to its V'
            draft.check_target(target)
            self.draft = draft
        else:  # a sub-vocabulary head (config.draft_vocab) trains on V' as osd.train does
            self.draft = apply_draft_vocab(draft)
            self.divergence = restrict_divergence(self.divergence, draft_vocab_ids(self.draft))
        self.temperature = temperature
        self.optimizer_step = adamw_step(draft.parameters(), learning_rate, weight_decay, max_grad_norm)

    @classmethod
    def from_args(cls, args: ServingArguments, target: PreTrainedModel) -> DraftDistiller:
        """`python -m osd.serving`'s distiller: the drafter `args` names (`load_drafter`), its loss and AdamW."""
        return cls(load_drafter(args, target), target, args.kl_method, args.learning_rate, args.weight_decay,
                   args.max_grad_norm, args.distill_temperature, args.jsd_beta)  # fmt: skip

    @torch.no_grad()
    def buffer(
        self, prompt_ids: list[int], generated_ids: list[int], positions: list[int]
    ) -> BufferedQuery | FeatureQuery:
        """A served query with the target's logits [W, V] at `positions` (indices into generated_ids), and for a
        head the target's states it reads."""
        if isinstance(self.draft, Eagle3Head):
            return teacher_forced_feature_query(
                self.target, self.draft.target_layers, prompt_ids, generated_ids, positions
            )
        query = BufferedQuery(
            input_ids=torch.tensor(prompt_ids),  # [T]
            generated_ids=torch.tensor(generated_ids),  # [N]
            positions=torch.tensor(positions, dtype=torch.long),  # [W]
            target_logits=torch.empty(0),
        )
        if positions:
            query.target_logits = stored_logits(logits_at(self.target, query))
        return query

    def loss(self, draft: PreTrainedModel | Eagle3Head, buffer: list, backward) -> torch.Tensor | None:
        if isinstance(draft, Eagle3Head):
            return head_distillation_loss(draft, buffer, backward, embed=self.target.get_input_embeddings(),
                                          divergence=self.divergence, temperature=self.temperature)  # fmt: skip
        return distillation_loss(draft, buffer, self.divergence, self.temperature, backward)

    def updater(self, config: OnlineArguments, state: OnlineState, learns: bool = True) -> DraftUpdater:
        """The online loop's updater of this draft (one route), with this distiller's loss and optimizer."""
        return DraftUpdater({SHARED_DRAFT: self.draft}, self.loss, self.optimizer_step, config, state, learns)


def load_drafter(args: ServingArguments, target: PreTrainedModel) -> PreTrainedModel | Eagle3Head:
    """The drafter as the trainer keeps it, in float32 on `target`'s device: --drafter head, the head at --head_path
    (or a fresh one for `target`); otherwise the draft model at --student_model_path."""
    if args.drafter == "head":
        return load_head_drafter(target, args.head_path)
    return load_model(args.student_model_path, "float32", None).to(target.device)


def export_draft(draft: PreTrainedModel | Eagle3Head, path: str | Path, dtype: torch.dtype) -> None:
    """The drafter's weights as one safetensors file in checkpoint names, its float tensors in `dtype`: what
    the engine reloads. A draft model's state dict, a tied output embedding written once (vLLM ties it again
    on load); a head's tensors as `save_head` writes them (osd.spec.eagle3.head_weights)."""
    if isinstance(draft, Eagle3Head):
        weights = head_weights(draft)
    else:
        seen, weights = set(), {}
        for name, tensor in draft.state_dict().items():
            if tensor.data_ptr() not in seen:
                seen.add(tensor.data_ptr())
                weights[name] = tensor
    save_file({name: t.detach().to("cpu", dtype if t.is_floating_point() else t.dtype).contiguous()
               for name, t in weights.items()}, str(path))  # fmt: skip
