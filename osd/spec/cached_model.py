"""A model with its KV cache over a committed sequence (the B = 1 engine's and the replay's view of a model)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache, EncoderDecoderCache, PreTrainedModel


def accepts_logits_to_keep(model: PreTrainedModel) -> bool:
    """Whether `model.forward` can apply the LM head at chosen positions only (most HF causal LMs)."""
    return "logits_to_keep" in inspect.signature(model.forward).parameters


@dataclass
class CachedModel:
    """A model with its KV cache over the committed sequence; encoder run once for seq2seq models."""

    model: PreTrainedModel
    encoder_input_ids: torch.Tensor | None  # [1, S] for encoder-decoder models, else None
    cache: DynamicCache | EncoderDecoderCache = field(init=False)
    encoder_outputs: object = field(init=False, default=None)
    keeps_logits: bool = field(init=False)

    def __post_init__(self) -> None:
        if self.model.config.is_encoder_decoder:
            self.cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
            self.encoder_outputs = self.model.get_encoder()(input_ids=self.encoder_input_ids.to(self.device))
        else:
            self.cache = DynamicCache()
        self.keeps_logits = accepts_logits_to_keep(self.model)

    @property
    def device(self) -> torch.device:
        return self.model.device

    def __len__(self) -> int:
        return self.cache.get_seq_length()

    def forward(self, tokens: torch.Tensor, num_logits: int) -> torch.Tensor:
        """Feed tokens [1, n] after the cache; return the last num_logits rows of logits [num_logits, V]."""
        kwargs = {"past_key_values": self.cache, "use_cache": True}
        if self.keeps_logits:
            kwargs["logits_to_keep"] = num_logits
        tokens = tokens.to(self.device)
        if self.encoder_outputs is not None:
            out = self.model(encoder_outputs=self.encoder_outputs, decoder_input_ids=tokens, **kwargs)
        else:
            out = self.model(input_ids=tokens, **kwargs)
        self.cache = out.past_key_values
        return out.logits[0, -num_logits:]

    def crop(self, length: int) -> None:
        """Keep the first `length` cached positions."""
        if len(self) > length:
            self.cache.crop(length - len(self))
