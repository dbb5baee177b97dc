"""A model with its KV cache over a committed sequence (the B = 1 engine's and the replay's view of a model)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache, EncoderDecoderCache, PreTrainedModel


def accepts_logits_to_keep(model: PreTrainedModel) -> bool:
    """Whether `model.forward` can apply the LM head at chosen positions only (most HF causal LMs)."""
    return "logits_to_keep" in inspect.signature(model.forward).parameters


def layer_inputs(hidden_states: tuple[torch.Tensor, ...], layers: tuple[int, ...]) -> torch.Tensor:
    """The input states of decoder `layers` (HF's `hidden_states[i]`, i below the last layer), concatenated:
    [B, n, len(layers) H]."""
    return torch.cat([hidden_states[i] for i in layers], dim=-1)


@dataclass
class CachedModel:
    """A model with its KV cache over the committed sequence; encoder run once for seq2seq models."""

    model: PreTrainedModel
    encoder_input_ids: torch.Tensor | None  # [1, S] for encoder-decoder models, else None
    # decoder layers whose input states each forward keeps in `features` [1, n, len(hidden_layers) H] (for a head)
    hidden_layers: tuple[int, ...] = ()
    features: torch.Tensor | None = field(init=False, default=None)
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
        if self.hidden_layers:
            kwargs["output_hidden_states"] = True
        tokens = tokens.to(self.device)
        if self.encoder_outputs is not None:
            out = self.model(encoder_outputs=self.encoder_outputs, decoder_input_ids=tokens, **kwargs)
        else:
            out = self.model(input_ids=tokens, **kwargs)
        self.cache = out.past_key_values
        if self.hidden_layers:
            self.features = layer_inputs(out.hidden_states, self.hidden_layers)
        return out.logits[0, -num_logits:]

    def crop(self, length: int) -> None:
        """Keep the first `length` cached positions."""
        if len(self) > length:
            self.cache.crop(length - len(self))
