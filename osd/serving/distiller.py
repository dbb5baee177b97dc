"""The trainer beside the engine: buffer served queries, distil the draft, export it for the swap.

Symbols: T prompt length, N generated tokens, W loss positions of a query, V vocabulary.

vLLM keeps no target logits for us, so `buffer` gets them from one teacher-forced forward of the
target (an HF model on --trainer_device) over prompt + generated tokens, at the loss positions only
(`logits_to_keep`). Everything after that is osd.distill.online's: the buffer format
(`BufferedQuery`), the loss (`distillation_loss` with the --kl_method divergence, on V' for a sub-vocabulary head), and the
optimizer cadence of --online_steps_per_update AdamW steps per update (constant learning rate).
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import PreTrainedModel

from osd.distill.losses import get_divergence
from osd.distill.online import BufferedQuery, distillation_loss, logits_at, stored_logits
from osd.spec.draft_vocab import apply_draft_vocab, draft_vocab_ids, restrict_divergence


class DraftDistiller:
    """The draft being distilled (trained in its own dtype), the target as teacher, AdamW."""

    def __init__(
        self,
        draft: PreTrainedModel,
        target: PreTrainedModel,
        kl_method: str = "forward",
        learning_rate: float = 1e-4,
        weight_decay: float = 0.0,
        max_grad_norm: float = 0.0,
        temperature: float = 1.0,
        jsd_beta: float = 0.5,
        steps_per_update: int = 1,
    ) -> None:
        self.draft, self.target = apply_draft_vocab(draft), target.eval()
        # a sub-vocabulary head (config.draft_vocab) trains on V' as osd.train does
        self.divergence = restrict_divergence(
            get_divergence(kl_method, jsd_beta), draft_vocab_ids(self.draft)
        )
        self.optimizer = torch.optim.AdamW(draft.parameters(), lr=learning_rate, weight_decay=weight_decay)
        self.max_grad_norm, self.temperature = max_grad_norm, temperature
        self.steps_per_update = steps_per_update

    @torch.no_grad()
    def buffer(self, prompt_ids: list[int], generated_ids: list[int], positions: list[int]) -> BufferedQuery:
        """A served query with the target's logits [W, V] at `positions` (indices into generated_ids)."""
        query = BufferedQuery(
            input_ids=torch.tensor(prompt_ids),  # [T]
            generated_ids=torch.tensor(generated_ids),  # [N]
            positions=torch.tensor(positions, dtype=torch.long),  # [W]
            target_logits=torch.empty(0),
        )
        if positions:
            query.target_logits = stored_logits(logits_at(self.target, query))
        return query

    def update(self, buffer: list[BufferedQuery]) -> float | None:
        """`steps_per_update` optimizer steps on the buffer's distillation loss; the last step's loss, or
        None when no position counts."""
        self.draft.train()
        for _ in range(self.steps_per_update):
            loss = distillation_loss(
                self.draft, buffer, self.divergence, self.temperature, backward=torch.Tensor.backward
            )
            if loss is None:
                break
            if self.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(self.draft.parameters(), self.max_grad_norm)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        self.draft.eval()
        return None if loss is None else loss.item()


def export_draft(draft: PreTrainedModel, path: str | Path, dtype: torch.dtype) -> None:
    """The draft's weights as one safetensors file in checkpoint names and `dtype`, what the engine
    reloads; a tied output embedding is written once (vLLM ties it again on load)."""
    seen, weights = set(), {}
    for name, tensor in draft.state_dict().items():
        if tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        weights[name] = tensor.detach().to("cpu", dtype).contiguous()
    save_file(weights, str(path))
