"""Tiny random model pairs for engine tests (built in seconds, no downloads)."""

from __future__ import annotations

import copy

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    GPTBigCodeConfig,
    GPTBigCodeForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    OPTConfig,
    OPTForCausalLM,
    PreTrainedModel,
    T5Config,
    T5ForConditionalGeneration,
)

VOCAB = 64


def _config(family: str, layers: int):
    # a wide initialisation keeps random models from repeating one token forever
    common = dict(vocab_size=VOCAB, bos_token_id=1, eos_token_id=2, pad_token_id=0, initializer_range=0.3)
    if family == "llama":
        return LlamaConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=4,
            max_position_embeddings=256,
            **common,
        )
    if family == "mistral":  # grouped-query attention
        return MistralConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            sliding_window=None,
            **common,
        )
    if family == "gpt2":
        return GPT2Config(n_embd=32, n_layer=layers, n_head=4, n_positions=256, **common)
    if family == "opt":
        return OPTConfig(
            hidden_size=32,
            ffn_dim=64,
            num_hidden_layers=layers,
            num_attention_heads=4,
            max_position_embeddings=256,
            word_embed_proj_dim=32,
            **common,
        )
    if family == "gpt_bigcode":  # multi-query attention
        return GPTBigCodeConfig(
            n_embd=32, n_layer=layers, n_head=4, n_positions=256, multi_query=True, **common
        )
    if family == "t5":
        return T5Config(
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=layers,
            num_decoder_layers=layers,
            num_heads=4,
            decoder_start_token_id=0,
            vocab_size=VOCAB,
            eos_token_id=2,
            pad_token_id=0,
            initializer_factor=3.0,
            feed_forward_proj="gated-gelu",
            tie_word_embeddings=False,
        )
    raise ValueError(family)


_CLASSES = {
    "llama": LlamaForCausalLM,
    "mistral": MistralForCausalLM,
    "gpt2": GPT2LMHeadModel,
    "opt": OPTForCausalLM,
    "gpt_bigcode": GPTBigCodeForCausalLM,
    "t5": T5ForConditionalGeneration,
}
FAMILIES = tuple(_CLASSES)


def tiny_model(family: str, layers: int = 2, seed: int = 0, **overrides) -> PreTrainedModel:
    """A random model of `family` (see FAMILIES); `overrides` set config fields."""
    torch.manual_seed(seed)
    config = _config(family, layers)
    for key, value in overrides.items():
        setattr(config, key, value)
    return _CLASSES[family](config).eval()


def draft_from_target(target: PreTrainedModel, noise: float, seed: int = 1) -> PreTrainedModel:
    """A draft that agrees with the target often but not always: its weights plus Gaussian noise."""
    draft = copy.deepcopy(target)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in draft.parameters():
            param.add_(noise * param.std().nan_to_num(0.0) * torch.randn(param.shape, generator=gen))
    return draft
