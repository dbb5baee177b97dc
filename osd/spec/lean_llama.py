"""A lean KV-cached forward for Llama models: the engine's path for the draft (`draft_cache`) and the target
(`target_cache`; in batches `osd.spec.batched.RowCache`), and so for the target-alone baseline
(`osd.spec.evaluate.target_only_greedy`).

Why. HF's forward spends much of a small model's step in per-call machinery (mask and position set-up, the
dynamic cache's concatenations, the attention dispatch, a module call per product) rather than in its
products: most of a small draft's step, and a measurable share of a small target's (`benchmarks.lean_target`).

What. `LeanLlamaCache` computes what `LlamaForCausalLM.forward` computes, with
- one KV cache per layer preallocated ([kv heads, capacity, head dim], grown by doubling; a crop only moves
  the length);
- the q/k/v products fused into one, and the gate/up products into one (concatenated weights);
- grouped-query keys and values read in place by the attention kernel, not repeated per query head;
- on a CPU, a bf16 or float16 model's attention computed in float32 (`LeanLlama.attention_dtype`), its KV cache
  kept in float32 (the rounded keys and values, widened exactly), the output rounded back;
- a bf16 draft multiplied by the rows kernel (`osd.spec.bf16_rows`, which widens its inputs to float32 anyway)
  kept in float32 between the kernel's products (`LeanLlama.state_dtype`): HF's float32 forward of its weights,
  without a rounding to bf16 and back around every product, norm and attention;
- the RoPE frequencies of the model's own rotary embedding (repeated to the head's width once per model);
- each product in the layout of the model's own linear layers (`product_kind`: oneDNN-packed, the bf16 rows
  kernel, both of these (packed passes, one-token steps by the kernel; a draft's, every pass by the kernel),
  weight-major or plain), so that a target served in a layout keeps it; a draft's plain bf16 layers are packed
  where oneDNN has bf16 kernels (`osd.spec.packed_linear`: the same products, without the per-call reorder);
- a prompt's leading tokens that the last prompt prefilled with the same weights shares (a system prompt, a
  template) taken from that prompt's keys and values, not computed again (`PromptKV`: a prefix cache of one
  entry, as serving engines keep many);
- the head over the sub-vocabulary rows only when the draft has one (`osd.spec.draft_vocab`), -inf elsewhere;
- the input states of chosen layers kept at each forward where an EAGLE-3 head reads them (`hidden_layers`).
`LeanLlama` is that forward over B rows with position ids and a slot mask; `LeanLlamaCache` runs it for one
sequence (`generate`), and the batched engine's `osd.spec.batched.RowCache` for its rows (draft and target), over
HF's dynamic cache and its own padding and rejection masks. Its logits and kept states equal those of HF's
forward attending in the same dtype (tests compare them, and the engine's tokens, on random Llama models) up to
the rounding of a product over concatenated weights.

The weights are derived from the model's parameters once per model (`_derived_weights`, cached while no
parameter has changed: an online trainer's refresh of its serving copy, in place, is seen by the version
counters) and shared by every sequence the engine decodes. Anything `supports_lean_step` refuses (other
families, biases, dynamic RoPE, gradients) keeps `CachedModel`, i.e. HF's forward.
"""

from __future__ import annotations

import itertools
import os
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from transformers import LlamaForCausalLM, PreTrainedModel

from osd.spec.bf16_rows import BF16RowsLinear, Tiles, bf16_rows_product, kernel_available, pack_tiles
from osd.spec.cached_model import CachedModel
from osd.spec.draft_vocab import SubVocabHead, full_vocab_logits
from osd.spec.packed_linear import PackedLinear, pack_weight, packed_product, packing_available
from osd.spec.packed_rows import (
    PackedRows,
    PackedRowsLinear,
    packed_rows_available,
    packed_rows_product,
    prepare_packed_rows,
)
from osd.spec.weight_major import WeightMajorLinear, weight_major_product

INITIAL_CAPACITY = 256  # cached positions allocated at first; doubled when a sequence outgrows them


def supports_lean_step(model: PreTrainedModel) -> bool:
    """Whether `model` is a Llama causal LM the lean step computes exactly: no biases, SiLU MLP, a RoPE whose
    frequencies do not depend on the sequence length."""
    if type(model) is not LlamaForCausalLM:
        return False
    config = model.config
    head = model.get_output_embeddings()
    rope_type = getattr(model.model.rotary_emb, "rope_type", "default")
    return (
        not config.attention_bias
        and not config.mlp_bias
        and config.hidden_act == "silu"
        and rope_type not in ("dynamic", "longrope")
        and getattr(head, "bias", None) is None
    )


def draft_cache(
    model: PreTrainedModel,
    encoder_input_ids: torch.Tensor | None,
    lean: bool = True,
    reuse_prompt: bool = True,
) -> CachedModel | LeanLlamaCache:
    """The draft's cache for one sequence: the lean step where `lean` and `supports_lean_step` (plain bf16
    layers packed where oneDNN has bf16 kernels; `reuse_prompt`: as `LeanLlamaCache`'s), else HF's forward."""
    if lean and encoder_input_ids is None and supports_lean_step(model):
        return LeanLlamaCache(model, pack_plain=True, reuse_prompt=reuse_prompt)
    return CachedModel(model, encoder_input_ids)


def target_cache(
    model: PreTrainedModel,
    encoder_input_ids: torch.Tensor | None = None,
    hidden_layers: tuple[int, ...] = (),
    lean: bool = True,
    reuse_prompt: bool = True,
) -> CachedModel | LeanLlamaCache:
    """The target's cache for one sequence: the lean step, in the layout of the target's own layers, where
    `lean` and `supports_lean_step` (`reuse_prompt`: as `LeanLlamaCache`'s), else HF's forward; either keeps the
    input states of `hidden_layers` at each forward (`features`, what an EAGLE-3 head reads)."""
    if lean and encoder_input_ids is None and supports_lean_step(model):
        return LeanLlamaCache(model, False, hidden_layers, reuse_prompt)
    return CachedModel(model, encoder_input_ids, hidden_layers)


class LeanProduct(NamedTuple):
    """One of the lean step's products other than `F.linear` ("plain")."""

    dtype: torch.dtype  # of the weights it multiplies by
    available: Callable[[], bool]  # on this machine and torch build
    prepare: Callable[[torch.Tensor], Prepared]  # a weight [out, in] as the product reads it
    product: Callable[[torch.Tensor, Prepared], torch.Tensor]  # x [N, in], a prepared weight -> [N, out]


def _contiguous(weight: torch.Tensor) -> torch.Tensor:
    return weight.contiguous()


Prepared = torch.Tensor | Tiles | PackedRows  # a weight as its product reads it: plain, packed, tiles, or two
PRODUCTS = {
    "packed": LeanProduct(torch.bfloat16, packing_available, pack_weight, packed_product),
    "bf16_rows": LeanProduct(torch.bfloat16, kernel_available, pack_tiles, bf16_rows_product),
    "packed_rows": LeanProduct(
        torch.bfloat16, packed_rows_available, prepare_packed_rows, packed_rows_product
    ),
    "weight_major": LeanProduct(torch.float32, lambda: True, _contiguous, weight_major_product),
}
LAYER_PRODUCTS = {
    PackedLinear: "packed",
    BF16RowsLinear: "bf16_rows",
    PackedRowsLinear: "packed_rows",
    WeightMajorLinear: "weight_major",
}
"""The product of each linear layer class that has its own (by exact class)."""


def product_kind(model: LlamaForCausalLM, pack_plain: bool) -> str:
    """How the lean step multiplies by `model`'s weights: as its linear layers would at inference (their
    `LAYER_PRODUCTS` entry, where it applies to the weights' dtype and device), or "packed" for plain bf16 CPU
    layers where `pack_plain` and oneDNN has bf16 kernels; otherwise "plain". Where `pack_plain` (a draft),
    "packed_rows" layers take the rows kernel for their prompts too: it reads the draft's float32 states
    (`LeanLlama.state_dtype`), which oneDNN's packed product would round to bf16."""
    weight = model.get_input_embeddings().weight
    layer = type(model.model.layers[0].self_attn.q_proj)
    kind = LAYER_PRODUCTS.get(layer, "packed" if layer is nn.Linear and pack_plain else "plain")
    if kind == "packed_rows" and pack_plain:
        kind = "bf16_rows"
    if kind == "plain":
        return kind
    spec = PRODUCTS[kind]
    return (
        kind if weight.device.type == "cpu" and weight.dtype == spec.dtype and spec.available() else "plain"
    )


@dataclass(frozen=True)
class PromptKV:
    """A prompt's keys and values as a first forward left them: the next prompt's leading tokens equal to its
    own are not computed again (`LeanLlamaCache.forward`). They depend on the weights, so they live with them."""

    state_dtype: torch.dtype  # of the forward that computed them (a draft's and a target's may differ)
    tokens: torch.Tensor  # [n]
    keys: torch.Tensor  # [layers, kv heads, n, D], in the attention dtype
    values: torch.Tensor  # [layers, kv heads, n, D]
    hidden_layers: tuple[int, ...]  # whose input states it kept as well (an EAGLE-3 head's)
    features: torch.Tensor | None  # [n, K H] of those layers, None where none


@dataclass
class _Layer:
    input_norm: torch.Tensor  # [H]
    qkv: Prepared  # [(heads + 2 kv heads) * D, H], prepared for the product (`product_kind`)
    o: Prepared  # [H, heads * D]
    post_norm: torch.Tensor  # [H]
    gate_up: Prepared  # [2 I, H]
    down: Prepared  # [H, I]


@dataclass
class _Weights:
    key: tuple[tuple[int, int], ...] | None  # `_parameter_key` of the parameters they were derived from
    product: str  # `product_kind`: "plain" (F.linear) or a key of PRODUCTS
    embed: torch.Tensor  # [V, H]
    layers: list[_Layer]
    norm: torch.Tensor  # [H]
    head: Prepared  # [V' or V, H]
    head_ids: torch.Tensor | None  # [V'] of a sub-vocabulary head
    vocab_size: int  # V
    rope_freqs: torch.Tensor  # [D] float32: the inverse frequencies, twice (HF's cat(freqs, freqs))
    rope_scaling: float
    last_prompt: PromptKV | None = None  # the last prompt prefilled with these weights (`LeanLlamaCache`)


_derived: weakref.WeakKeyDictionary[PreTrainedModel, _Weights] = weakref.WeakKeyDictionary()


def prepare_lean_step(model: PreTrainedModel) -> None:
    """Derive the lean step's weights of draft `model` now (e.g. in a background thread after a refresh), not at
    the next sequence's first step; nothing for a model the lean step does not support."""
    if supports_lean_step(model):
        _derived_weights(model, pack_plain=True)


def _parameter_key(model: PreTrainedModel) -> tuple[tuple[int, int], ...] | None:
    """(data pointer, version) of every parameter; None where one was made under inference mode (it keeps no
    version counter), so that the weights are derived again for every sequence."""
    params = list(model.parameters())
    if any(p.is_inference() for p in params):
        return None
    return tuple((p.data_ptr(), p._version) for p in params)


def _derived_weights(model: LlamaForCausalLM, pack_plain: bool) -> _Weights:
    """The lean step's weights of `model`: reused while its parameters and product kind are unchanged, else
    derived again."""
    key, kind = _parameter_key(model), product_kind(model, pack_plain)
    cached = _derived.get(model)
    if cached is not None and key is not None and cached.key == key and cached.product == kind:
        return cached
    head = model.get_output_embeddings()
    embed = model.get_input_embeddings().weight

    product = _contiguous if kind == "plain" else PRODUCTS[kind].prepare
    with torch.no_grad():
        layers = [
            _Layer(
                input_norm=layer.input_layernorm.weight,
                qkv=product(
                    torch.cat(
                        [
                            layer.self_attn.q_proj.weight,
                            layer.self_attn.k_proj.weight,
                            layer.self_attn.v_proj.weight,
                        ]
                    )
                ),
                o=product(layer.self_attn.o_proj.weight),
                post_norm=layer.post_attention_layernorm.weight,
                gate_up=product(torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight])),
                down=product(layer.mlp.down_proj.weight),
            )
            for layer in model.model.layers
        ]
        head_ids = head.token_ids if isinstance(head, SubVocabHead) else None
        rows = head.weight if head_ids is None else head.weight.index_select(0, head_ids)
        inv_freq = model.model.rotary_emb.inv_freq.float()  # [D / 2]
        weights = _Weights(
            key=key,
            product=kind,
            embed=embed,
            layers=layers,
            norm=model.model.norm.weight,
            head=product(rows),
            head_ids=head_ids,
            vocab_size=head.weight.shape[0],
            rope_freqs=inv_freq.repeat(2),
            rope_scaling=float(model.model.rotary_emb.attention_scaling),
        )
    _derived[model] = weights
    return weights


KVStore = Callable[[int, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
"""(layer, keys, values) of the fed tokens [B, kv heads, n, D] -> the layer's cached keys and values after them
[B, kv heads, W, D], kept in the dtype they come in (`LeanLlama` gives its `attention_dtype`, so that attention
reads the cache without a conversion)."""


class LeanLlama:
    """The lean step's forward over B rows of a Llama model (module docstring); the caller keeps the KV cache.
    pack_plain: as `product_kind`'s (True for a draft); hidden_layers: decoder layers whose input states each
    forward keeps in `features` [B, n, len(hidden_layers) H] (HF's `hidden_states[i]`; for an EAGLE-3 head)."""

    def __init__(
        self, model: LlamaForCausalLM, pack_plain: bool, hidden_layers: tuple[int, ...] = ()
    ) -> None:
        config = model.config
        self.w = _derived_weights(model, pack_plain)
        self.hidden_layers = hidden_layers
        self.features: torch.Tensor | None = None
        self.num_heads, self.num_kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.grouped = self.num_kv_heads != self.num_heads
        self.head_dim = config.head_dim
        self.scale = model.model.layers[0].self_attn.scaling
        self.eps = config.rms_norm_eps
        # float32 for a bf16 or float16 model on a CPU, its keys and values widened exactly: torch's bf16 CPU
        # attention takes several times as long for one query; else the model's dtype
        dtype = self.w.embed.dtype
        reduced_on_cpu = self.device.type == "cpu" and dtype in (torch.bfloat16, torch.float16)
        self.attention_dtype = torch.float32 if reduced_on_cpu else dtype
        # a draft multiplied by the rows kernel, which widens its inputs to float32 anyway, keeps its states in
        # float32: no rounding to bf16 and back around every product, norm and attention (a target keeps HF's)
        self.state_dtype = torch.float32 if pack_plain and self.w.product == "bf16_rows" else dtype
        half = torch.ones(self.head_dim // 2, dtype=self.state_dtype, device=self.device)
        self.rope_signs = torch.cat([-half, half])  # [D]: the sin's first half negated (`_rotate`)

    @property
    def device(self) -> torch.device:
        return self.w.embed.device

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | None,
        store: KVStore,
        num_logits: int,
    ) -> torch.Tensor:
        """Feed tokens [B, n] at position ids [B, n]; `mask` [B or 1, 1, n, W] is True where a fed token may attend
        to one of the W slots `store` returns (None: to all of them). Logits of the last num_logits fed tokens
        [B, num_logits, V]."""
        B, n = tokens.shape
        cos, signed_sin = self._rope(positions)  # [B, 1, n, D] each
        h = F.embedding(tokens, self.w.embed).to(self.state_dtype)  # [B, n, H]
        inputs = {}  # the kept layers' input states, [B, n, H] each
        kv_dtype = self.attention_dtype  # what the store keeps and attention reads
        for i, layer in enumerate(self.w.layers):
            if i in self.hidden_layers:
                inputs[i] = h
            qkv = self._linear(self._rms_norm(h, layer.input_norm), layer.qkv)  # [B, n, (heads + 2 kv) * D]
            qkv = qkv.view(B, n, -1, self.head_dim).transpose(1, 2)  # [B, heads + 2 kv, n, D]
            qk = _rotate(qkv[:, : self.num_heads + self.num_kv_heads], cos, signed_sin)  # q and k at once
            q, k = qk.split([self.num_heads, self.num_kv_heads], dim=1)
            v = qkv[:, self.num_heads + self.num_kv_heads :]
            keys, values = store(i, k.to(kv_dtype), v.to(kv_dtype))  # [B, kv heads, W, D]
            attn = self._attention(q, keys, values, mask)  # [B, heads, n, D]
            h = h + self._linear(attn.transpose(1, 2).reshape(B, n, -1), layer.o)
            gate_up = self._linear(self._rms_norm(h, layer.post_norm), layer.gate_up)  # [B, n, 2 I]
            gate, up = gate_up.chunk(2, dim=-1)
            h = h + self._linear(F.silu(gate) * up, layer.down)
        if self.hidden_layers:
            self.features = torch.cat([inputs[i] for i in self.hidden_layers], dim=-1)  # [B, n, K H]
        last = self._rms_norm(h[:, -num_logits:], self.w.norm)  # [B, num_logits, H]
        logits = self._linear(last, self.w.head)  # [B, num_logits, V' or V]
        if self.w.head_ids is None:
            return logits
        return full_vocab_logits(logits, self.w.head_ids, self.w.vocab_size)

    def _linear(self, x: torch.Tensor, weight: Prepared) -> torch.Tensor:
        """x [..., in] @ weight.T -> [..., out]."""
        if self.w.product == "plain":
            return F.linear(x, weight)
        return PRODUCTS[self.w.product].product(x.reshape(-1, x.shape[-1]), weight).view(*x.shape[:-1], -1)

    def _attention(
        self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        """SDPA of q [B, heads, n, D] over the cached keys and values [B, kv heads, W, D] (in `attention_dtype`)
        -> [B, heads, n, D] in q's dtype; grouped-query keys and values are read in place."""
        attn = F.scaled_dot_product_attention(
            q.to(self.attention_dtype),
            keys,
            values,
            attn_mask=mask,
            scale=self.scale,
            enable_gqa=self.grouped,
        )
        return attn.to(q.dtype)

    def _rms_norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """LlamaRMSNorm: normalised in float32, scaled in the input's dtype (float32 states: in one op)."""
        if x.dtype == torch.float32:
            return F.rms_norm(x, weight.shape, weight.float(), self.eps)
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * x32.to(x.dtype)

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [B, 1, n, D] at position ids [B, n] in `state_dtype`, as LlamaRotaryEmbedding computes them,
        the sin's first half negated (`_rotate`; negation is exact, before or after rounding)."""
        freqs = self.w.rope_freqs.to(self.device)  # [D]: the inverse frequencies, twice
        angles = positions.to(self.device, torch.float32)[:, None, :, None] * freqs  # [B, 1, n, D]
        cos, sin = angles.cos(), angles.sin()
        if self.w.rope_scaling != 1.0:
            cos, sin = cos * self.w.rope_scaling, sin * self.w.rope_scaling
        return cos.to(self.state_dtype), sin.to(self.state_dtype) * self.rope_signs


class LeanLlamaCache:
    """A Llama model with its KV cache over the committed sequence; `CachedModel`'s interface (forward, crop,
    len, `features` of `hidden_layers`), computed by the lean step (module docstring). pack_plain: as
    `product_kind`'s."""

    def __init__(
        self,
        model: LlamaForCausalLM,
        pack_plain: bool = True,
        hidden_layers: tuple[int, ...] = (),
        reuse_prompt: bool = True,
    ) -> None:
        self.lean = LeanLlama(model, pack_plain, hidden_layers)
        self.length = 0
        # the first forward takes the keys and values (and kept states) of its leading tokens shared with the
        # last prompt of the same weights
        self.reuse_prompt = reuse_prompt
        self.reused = 0  # positions the first forward took from the last prompt
        # [layers, kv heads, capacity, D], allocated at the first forward
        self.keys = self.values = torch.empty(0)

    @property
    def device(self) -> torch.device:
        return self.lean.device

    def __len__(self) -> int:
        return self.length

    @property
    def hidden_layers(self) -> tuple[int, ...]:
        return self.lean.hidden_layers

    @property
    def features(self) -> torch.Tensor | None:
        """The last forward's input states of `hidden_layers` [1, n, K H] (None: none kept)."""
        return self.lean.features

    def crop(self, length: int) -> None:
        """Keep the first `length` cached positions."""
        self.length = min(self.length, length)

    def forward(self, tokens: torch.Tensor, num_logits: int) -> torch.Tensor:
        """Feed tokens [1, n] after the cache; return the last num_logits rows of logits [num_logits, V]. The first
        forward (a prompt) computes only the tokens after those it shares with the last prompt prefilled with the
        same weights (its `features` cover all n), and leaves its own for the next (where `reuse_prompt`)."""
        tokens = tokens.to(self.device)
        if self.length or not self.reuse_prompt:
            return self._feed(tokens, num_logits)
        last = self._take_prompt(tokens[0], tokens.shape[1] - num_logits)
        logits = self._feed(tokens[:, self.reused :], num_logits)
        lean, end = self.lean, self.length
        if self.reused and self.hidden_layers:  # [1, n, K H]: the taken prompt's states, then the fed tokens'
            lean.features = torch.cat([last.features[None, : self.reused], lean.features], dim=1)
        lean.w.last_prompt = PromptKV(
            lean.state_dtype,
            tokens[0].clone(),
            self.keys[:, :, :end].clone(),
            self.values[:, :, :end].clone(),
            self.hidden_layers,
            lean.features[0].clone() if self.hidden_layers else None,
        )
        return logits

    def _take_prompt(self, tokens: torch.Tensor, most: int) -> PromptKV | None:
        """Copy the keys and values of the leading tokens of `tokens` [n] shared with the last prompt, at most
        `most` of them, into the empty cache (`reused`: how many); returns that prompt where it could serve."""
        last, self.reused = self.lean.w.last_prompt, 0
        if (
            last is None
            or last.state_dtype != self.lean.state_dtype
            or (self.hidden_layers and last.hidden_layers != self.hidden_layers)
        ):
            return None
        most = min(most, len(last.tokens))
        self.reused = int((tokens[:most] == last.tokens[:most]).int().cumprod(0).sum()) if most > 0 else 0
        if self.reused:
            self._reserve(len(tokens))
            self.keys[:, :, : self.reused] = last.keys[:, :, : self.reused]
            self.values[:, :, : self.reused] = last.values[:, :, : self.reused]
            self.length = self.reused
        return last

    def _feed(self, tokens: torch.Tensor, num_logits: int) -> torch.Tensor:
        """Feed tokens [1, n] (on the cache's device) after the cache: `forward` without the prompt's reuse."""
        n = tokens.shape[1]
        start, end = self.length, self.length + n
        self._reserve(end)
        positions = torch.arange(start, end, device=self.device)[None]  # [1, n]
        mask = None if n == 1 else torch.ones(n, end, dtype=torch.bool, device=self.device).tril(start)

        def store(i: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            self.keys[i, :, start:end], self.values[i, :, start:end] = k[0], v[0]
            return self.keys[i, None, :, :end], self.values[i, None, :, :end]

        logits = self.lean.forward(tokens, positions, mask, store, num_logits)[0]
        self.length = end
        return logits

    def _reserve(self, length: int) -> None:
        """Room for `length` cached positions (the cached ones kept)."""
        capacity = self.keys.shape[2] if self.keys.dim() == 4 else 0
        if length <= capacity:
            return
        new_capacity = max(INITIAL_CAPACITY, 2 * capacity, length)
        lean = self.lean
        shape = (len(lean.w.layers), lean.num_kv_heads, new_capacity, lean.head_dim)
        keys = torch.empty(shape, dtype=lean.attention_dtype, device=self.device)
        values = torch.empty_like(keys)
        if capacity:
            keys[:, :, : self.length] = self.keys[:, :, : self.length]
            values[:, :, : self.length] = self.values[:, :, : self.length]
        self.keys, self.values = keys, values


def reused_prompt_tokens(prompts: Sequence[Sequence[int]]) -> list[int]:
    """How many positions `LeanLlamaCache` takes from the prompt before for each of `prompts` served in turn (the
    first from none): the leading tokens shared with it, all but the prompt's last at most."""
    taken = [min(len(os.path.commonprefix([a, b])), len(b) - 1) for a, b in itertools.pairwise(prompts)]
    return [0][: len(prompts)] + taken


def prompt_sizes(prompts: Sequence[Sequence[int]]) -> tuple[int, int]:
    """(tokens, positions taken from the prompt before) of a mean prompt of `prompts` served in turn, rounded down:
    what a timed prefill charges a query (`osd.spec.timing.prefill_time`)."""
    return sum(map(len, prompts)) // len(prompts), sum(reused_prompt_tokens(prompts)) // len(prompts)


def _rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """RoPE of x [B, heads, n, D] with cos and sin [B, 1, n, D], the sin's first half negated: HF's
    apply_rotary_pos_emb, x * cos + cat(-x2, x1) * sin, with the halves swapped by one roll (negation is exact, so
    the products are the same)."""
    return x * cos + torch.roll(x, x.shape[-1] // 2, dims=-1) * signed_sin
