"""vLLM's Llama with a sub-vocabulary head: the model class of a served draft (osd.serving.subvocab)."""

from __future__ import annotations

import torch
from vllm.model_executor.models.llama import LlamaForCausalLM

from osd.spec.draft_vocab import full_vocab_logits


class SubVocabLlamaForCausalLM(LlamaForCausalLM):
    """vLLM's Llama scoring the V' tokens of `config.draft_vocab` only (-inf elsewhere)."""

    def __init__(self, *, vllm_config, prefix: str = "") -> None:
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        hf_config = vllm_config.model_config.hf_config
        self.register_buffer(
            "draft_vocab", torch.tensor(hf_config.draft_vocab, dtype=torch.long), persistent=False
        )
        self.full_vocab_size = hf_config.vocab_size
        self._rows: torch.Tensor | None = None  # lm_head.weight[draft_vocab] [V', H]

    def refresh_head(self) -> None:
        """Gather the head's V' rows again on the next call (the weights changed in place)."""
        self._rows = None

    def head_rows(self) -> torch.Tensor:
        """The rows the head scores, lm_head.weight[draft_vocab] [V', H], gathered once per weight load."""
        if self._rows is None:
            weight = self.lm_head.weight  # [V (padded), H]
            self._rows = weight.index_select(0, self.draft_vocab.to(weight.device))
        return self._rows

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """hidden [N, H] -> logits [N, V], -inf outside V'."""
        rows = self.head_rows()
        sub = hidden_states.to(rows.dtype) @ rows.T  # [N, V']
        return full_vocab_logits(sub, self.draft_vocab, self.full_vocab_size)
