"""An EAGLE-3 head (Li et al. 2025, arXiv 2503.01840): a drafter that reads the target's own hidden states.

Symbols: B rows, n fed positions, W cached slots, H hidden size (the target's), V the target's vocabulary,
V' the head's draft vocabulary, K target layers read (3).

Architecture, as vLLM's `llama_eagle3.py` and the `speculators` package build it:
- fuse: the target's hidden states at K layers (the inputs of its decoder layers `target_layers`: EAGLE-3's low,
  middle and high ones), concatenated [.., K H] and projected by `fc` to [.., H];
- one Llama decoder layer whose attention reads concat(input_layernorm(embed(token)), hidden_norm(h)) [.., 2H]; its
  residual stream starts at h itself (`norm_before_residual` false, as EAGLE-3's reference code);
- `norm`, then `lm_head` over the V' tokens of a sub-vocabulary (FR-Spec's idea, `osd.spec.draft_vocab`): `d2t`
  [V'] maps draft id i to target id i + d2t[i], `t2d` [V] marks the target ids in V' (vLLM's and speculators'
  names). The engine sees full-vocabulary logits, -inf outside V' (q = 0 there: decoding stays exact).
The token embedding is the target's, frozen and not the head's: the caller passes it (`embed`), so that training
never moves it and a saved head does not carry it (vLLM shares the target's when the checkpoint has none).

Alignment. Entry i of the head reads token i + 1 with the target's feature at position i (computed on tokens 0..i),
at position id i, and predicts token i + 2. A draft chain's later steps read the head's own output state (before
`norm`) in place of the target's feature: EAGLE-3's training-time test, at inference. The KV caches that run the
head over sequences and batches live in `osd.spec.head_cache`.

Save and load (`save_head`, `load_head`): a folder of `config.json` and `model.safetensors` in the `speculators`
format (`speculators_model_type: "eagle3"`), which vLLM loads with `method: "eagle3"`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import LlamaConfig, PreTrainedModel
from transformers.models.llama.modeling_llama import (
    LlamaMLP,
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
)

from osd.paths import repo_relative
from osd.spec.draft_vocab import full_vocab_logits
from osd.spec.lean_llama import KVStore

SPECULATORS_FORMAT_VERSION = "0.9.0"  # the `speculators` release whose eagle3 layout `save_head` writes


def eagle3_layers(num_layers: int) -> tuple[int, int, int]:
    """The target layers whose inputs the head reads: EAGLE-3's (2, L // 2, L - 3), vLLM's default, where those are
    three distinct layers (L >= 7); else (1, L // 2, L - 1), a low, a middle and a high one of a shallow target."""
    if num_layers < 4:
        raise ValueError(
            f"an EAGLE-3 head reads three distinct layers of the target above its first; the target has "
            f"{num_layers} decoder layers, it needs at least 4"
        )
    layers = (2, num_layers // 2, num_layers - 3)
    return layers if layers[0] < layers[1] < layers[2] else (1, num_layers // 2, num_layers - 1)


def head_layer_config(target_config, vocab_size: int) -> LlamaConfig:
    """The head's decoder layer: a Llama layer of the target's width, heads, MLP and RoPE (as speculators' default)."""
    rope = getattr(target_config, "rope_parameters", None) or {"rope_type": "default", "rope_theta": 10000.0}
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=target_config.hidden_size,
        intermediate_size=target_config.intermediate_size,
        num_hidden_layers=1,
        num_attention_heads=target_config.num_attention_heads,
        num_key_value_heads=getattr(target_config, "num_key_value_heads", target_config.num_attention_heads),
        head_dim=getattr(target_config, "head_dim", None)
        or target_config.hidden_size // target_config.num_attention_heads,
        max_position_embeddings=target_config.max_position_embeddings,
        rms_norm_eps=target_config.rms_norm_eps,
        rope_parameters=dict(rope),
        hidden_act="silu",
        tie_word_embeddings=False,
    )


class Eagle3Attention(nn.Module):
    """Self-attention over [.., 2H] inputs (token embedding and feature), keys and values kept by the caller."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = (
            config.num_attention_heads, config.num_key_value_heads, config.head_dim
        )  # fmt: skip
        width = 2 * config.hidden_size
        self.q_proj = nn.Linear(width, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(width, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(width, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=False)
        self.rotary = LlamaRotaryEmbedding(config)

    def forward(
        self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None, store: KVStore
    ) -> torch.Tensor:
        """x [B, n, 2H] at position ids [B, n]; `store` appends the fed keys and values [B, kv heads, n, D] and
        returns the W to attend to; mask [B or 1, 1, n, W] True where a fed position may attend. -> [B, n, H]."""
        B, n, _ = x.shape
        q = self.q_proj(x).view(B, n, self.num_heads, self.head_dim).transpose(1, 2)  # [B, heads, n, D]
        k = self.k_proj(x).view(B, n, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, n, self.num_kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = self.rotary(x, positions)  # [B, n, D]
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        keys, values = store(0, k, v)  # [B, kv heads, W, D]
        if self.num_kv_heads != self.num_heads:
            groups = self.num_heads // self.num_kv_heads
            keys, values = keys.repeat_interleave(groups, 1), values.repeat_interleave(groups, 1)
        attn = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=self.head_dim**-0.5)
        return self.o_proj(attn.transpose(1, 2).reshape(B, n, -1))


class Eagle3Layer(nn.Module):
    """The modules of the head's decoder layer (EAGLE-3's first layer: attention over [embedding, feature]), named
    as vLLM and speculators name them; `Eagle3Head.forward` runs it."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.self_attn = Eagle3Attention(config)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.hidden_norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)


class Eagle3Head(nn.Module):
    """An EAGLE-3 draft head over a target's hidden states (module docstring)."""

    def __init__(
        self,
        config: LlamaConfig,
        target_layers: Sequence[int],
        token_ids: Sequence[int] | torch.Tensor | None = None,
    ) -> None:
        """config: the head's decoder layer (`head_layer_config`; vocab_size the target's V); target_layers: the K
        target layers it reads; token_ids: the draft vocabulary V' (sorted target ids; None: all V)."""
        super().__init__()
        self.config, self.target_layers = config, tuple(target_layers)
        V, H = config.vocab_size, config.hidden_size
        ids = torch.arange(V) if token_ids is None else torch.as_tensor(token_ids, dtype=torch.long).unique()
        if ids.numel() == 0 or int(ids[0]) < 0 or int(ids[-1]) >= V:
            raise ValueError(
                f"draft vocabulary ids must be non-empty and within [0, {V}), got {ids.numel()} ids"
            )
        self.fc = nn.Linear(len(self.target_layers) * H, H, bias=False)
        self.layers = nn.ModuleList([Eagle3Layer(config)])
        self.norm = LlamaRMSNorm(H, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(H, ids.numel(), bias=False)
        self.register_buffer("d2t", ids - torch.arange(ids.numel()))  # [V'] target id - draft id
        self.register_buffer("t2d", torch.zeros(V, dtype=torch.bool).index_fill_(0, ids, True))  # [V]

    @classmethod
    def for_target(
        cls, target: PreTrainedModel, token_ids: Sequence[int] | torch.Tensor | None = None, seed: int = 0
    ) -> Eagle3Head:
        """A randomly initialised head for `target` (its dtype and device), reading `eagle3_layers` of it."""
        config = target.config
        if config.is_encoder_decoder or not hasattr(config, "intermediate_size"):
            raise ValueError(
                f"an EAGLE-3 head drafts for decoder-only targets of a Llama-style config (hidden_size, "
                f"intermediate_size, num_attention_heads), got {config.model_type}"
            )
        vocab = target.get_input_embeddings().num_embeddings
        with torch.random.fork_rng(devices=[]):  # seeded without touching the caller's generator
            torch.manual_seed(seed)
            head = cls(head_layer_config(config, vocab), eagle3_layers(config.num_hidden_layers), token_ids)
        return head.to(target.device, target.dtype).eval()

    @property
    def device(self) -> torch.device:
        return self.fc.weight.device

    @property
    def token_ids(self) -> torch.Tensor:
        """The draft vocabulary as target ids [V'], sorted."""
        return torch.arange(len(self.d2t), device=self.d2t.device) + self.d2t

    def check_target(self, target: PreTrainedModel) -> None:
        """Refuse a target this head cannot read (naming what differs)."""
        config = target.config
        if config.is_encoder_decoder or config.hidden_size != self.config.hidden_size:
            raise ValueError(
                f"this EAGLE-3 head reads a decoder-only target of hidden size {self.config.hidden_size}, got "
                f"{config.model_type} of hidden size {config.hidden_size}"
            )
        if max(self.target_layers) >= config.num_hidden_layers:
            raise ValueError(
                f"this EAGLE-3 head reads layers {self.target_layers}, the target has {config.num_hidden_layers}"
            )
        if target.get_input_embeddings().num_embeddings != self.config.vocab_size:
            raise ValueError(
                f"this EAGLE-3 head was built for a vocabulary of {self.config.vocab_size} ids, the target embeds "
                f"{target.get_input_embeddings().num_embeddings}: use the target it was trained on"
            )

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """The target's states at the K layers, concatenated [.., K H] -> the head's input feature [.., H]."""
        return self.fc(features.to(self.fc.weight.dtype))

    def forward(
        self,
        embeds: torch.Tensor,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | None,
        store: KVStore,
    ) -> torch.Tensor:
        """Token embeddings and input states [B, n, H] (fused target features, or the head's own earlier outputs)
        at position ids [B, n] -> output states [B, n, H] (the next chain step's input; `logits` reads them)."""
        layer = self.layers[0]
        x = torch.cat(
            [layer.input_layernorm(embeds.to(hidden.dtype)), layer.hidden_norm(hidden)], -1
        )  # [B, n, 2H]
        h = hidden + layer.self_attn(
            x, positions, mask, store
        )  # the residual stream starts at the input state
        return h + layer.mlp(layer.post_attention_layernorm(h))

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        """Output states [.., H] -> logits over the draft vocabulary [.., V']."""
        return self.lm_head(self.norm(states))

    def full_logits(self, states: torch.Tensor) -> torch.Tensor:
        """Output states [.., H] -> logits over the target's vocabulary [.., V], -inf outside V'."""
        return full_vocab_logits(self.logits(states), self.token_ids, self.config.vocab_size)


# ---- save and load: the speculators format ---------------------------------------------------------------------


def save_head(
    head: Eagle3Head, path: str | Path, target: PreTrainedModel | None = None, speculative_tokens: int = 3
) -> Path:
    """Write `head` as a speculators-format folder (config.json, model.safetensors) that vLLM loads with
    `method: "eagle3"`. target: recorded as the verifier (its name or path, relative inside this repository;
    architectures); speculative_tokens: the number of proposals vLLM makes by default."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    layer = head.config.to_dict()
    verifier = {"name_or_path": None, "architectures": []}
    if target is not None:
        verifier = {"name_or_path": repo_relative(target.config.name_or_path) or None,
                    "architectures": list(target.config.architectures or [])}  # fmt: skip
    config = {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_version": SPECULATORS_FORMAT_VERSION,
        "transformer_layer_config": layer,
        "draft_vocab_size": len(head.d2t),
        "target_hidden_size": head.config.hidden_size,
        "eagle_aux_hidden_state_layer_ids": list(head.target_layers),
        "norm_before_residual": False,
        "norm_before_fc": False,
        "fc_norm": False,
        "norm_output": False,
        "embed_requires_grad": False,
        "speculators_config": {
            "algorithm": "eagle3",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": speculative_tokens}],
            "default_proposal_method": "greedy",
            "verifier": verifier,
        },
    }
    (path / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    save_file(head_weights(head), str(path / "model.safetensors"))
    return path


def head_weights(head: Eagle3Head) -> dict[str, torch.Tensor]:
    """The head's tensors in checkpoint names, on the CPU: what `save_head` writes and vLLM loads (fc, layers.0.*,
    norm, lm_head; d2t and t2d for a sub-vocabulary head only: vLLM and speculators expect no mapping otherwise)."""
    weights = {name: t.detach().contiguous().cpu() for name, t in head.state_dict().items()}
    if len(head.d2t) == head.config.vocab_size:
        weights.pop("d2t"), weights.pop("t2d")
    return weights


def load_head(path: str | Path, device: torch.device | str = "cpu") -> Eagle3Head:
    """A head `save_head` wrote (or another speculators-format EAGLE-3 head of one Llama layer)."""
    path = Path(path)
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no config.json (write a head with save_head)") from None
    if config.get("speculators_model_type") != "eagle3":
        raise ValueError(
            f"{path}/config.json: speculators_model_type {config.get('speculators_model_type')!r}, expected 'eagle3'"
        )
    variants = ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")
    unsupported = [k for k in variants if config.get(k)]
    layer = LlamaConfig(**config["transformer_layer_config"])
    if unsupported or layer.num_hidden_layers != 1:
        raise ValueError(
            f"{path}/config.json: osd runs EAGLE-3 heads of one layer without {unsupported or 'extra norms'}; "
            f"this one has {layer.num_hidden_layers} layers"
        )
    weights = load_file(str(path / "model.safetensors"))
    d2t = weights.get("d2t")
    token_ids = None if d2t is None else torch.arange(len(d2t)) + d2t
    head = Eagle3Head(layer, config["eagle_aux_hidden_state_layer_ids"], token_ids)
    weights.setdefault("d2t", head.d2t)  # a full-vocabulary head is saved without a mapping
    weights.setdefault("t2d", head.t2d)
    head.load_state_dict(weights)
    dtype = weights["fc.weight"].dtype
    return head.to(device, dtype).eval()
