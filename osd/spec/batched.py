"""Batched speculative decoding's KV caches: B prompts decoded together, every row accepting its own number
of draft tokens at every step. The step loop is `SpeculativeDecoder.generate_batch` (`osd.spec.decoder`, next
to `generate`, the B = 1 engine); this module holds the caches it steps (`RowCache`), below the engine, so
that `osd.spec.timing` can time a step as the engine takes it.

Cache layout. Draft and target each keep one KV cache for the rows still decoding, W slots wide,
with a 0/1 mask [B, W] of the slots that hold each row's cached tokens (its committed prefix, in
order); masked slots are padding, and row i's position ids count its own tokens only. Every forward
feeds the same number u of tokens to each row (its committed tokens the model has not seen,
left-padded where it has fewer), and the fed slots join the mask. After a step (`RowCache.keep`)
row i drops the proposals it rejected by masking their slots: no row is rolled back to the batch's
shortest acceptance and no cache is copied. Slots no row uses at the end are cropped, and when
masked slots take up more than `SLACK` of the width, one gather per cache moves every row's tokens
to the last slots (`_compact`): attention over masked slots costs compute, a gather costs a copy of
the cache. Rows that finished (EOS or length) leave the batch and cost nothing more.

Encoder-decoder (T5) models compute relative positions from slot distances, so their caches hold
no holes: they are compacted at every rejection (right-aligned, as at the prefill), and a row with
fewer unseen tokens re-feeds its last cached ones instead of padding. Decoder-only models take the
position ids, so masked slots inside a row change nothing but the cost. (A sliding attention window
counts slots, masked ones included: within SLACK of the window's length a row would see fewer
tokens than alone, as left padding already does in HF's batched `generate`.)

Lean path. A Llama draft and a Llama target step through `osd.spec.lean_llama.LeanLlama` (as in `generate`,
unless `lean_draft=False` / `lean_target=False`; the target in its own layers' layout): the same logits, and the
same states kept for a head, as HF's forward over the same slots, positions and mask, without HF's per-call
machinery. A padded fed token also attends to its own slot, so that no attention row is empty.

Step (`SpeculativeDecoder._batch_step`). k = max_i k_i with k_i = min(gamma, remaining_i - 1): every row proposes and verifies k draft
tokens but counts only its first k_i (and none after a drafted EOS), so its accepted lengths, exact
alpha, wrong positions and output are those of `generate` on that row alone (greedy: identical
tokens; sampling: every row distributed as the target's).

Symbols: B rows, k proposals per step, V shared vocabulary, W cache width (slots).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch
from transformers import DynamicCache, EncoderDecoderCache, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput

from osd.spec.cached_model import accepts_logits_to_keep, layer_inputs
from osd.spec.lean_llama import KVStore, LeanLlama, supports_lean_step

PAD_ID = 0  # fed at padded slots; masked, so any valid id does
SLACK = 0.25  # masked slots may take up this share of a cache's width before it is compacted


class LeanStep(Protocol):
    """A forward that replaces HF's over the cache's slots (`LeanLlama.forward`'s contract)."""

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | None,
        store: KVStore,
        num_logits: int,
    ) -> torch.Tensor: ...


@dataclass
class RowCache:
    """One model's KV cache over the active rows (encoder run once for seq2seq models), with a mask of
    the slots that hold each row's cached tokens (see the module docstring)."""

    model: PreTrainedModel
    encoder_outputs: BaseModelOutput | None  # [B, S, H] for encoder-decoder models
    encoder_mask: torch.Tensor | None  # [B, S]
    valid: torch.Tensor  # [B, W] long, on the model's device: 1 at slots holding a cached token of the row
    lengths: torch.Tensor  # [B] cached tokens per row (valid.sum(1), on the CPU)
    # a Llama model's lean step (`osd.spec.lean_llama`) or an EAGLE-3 head's (`osd.spec.head_cache`), not HF's
    lean: LeanStep | None = None
    # decoder layers whose input states each forward keeps in `features` [B, u, len(hidden_layers) H] (for a head)
    hidden_layers: tuple[int, ...] = ()
    features: torch.Tensor | None = field(init=False, default=None)
    cache: DynamicCache | EncoderDecoderCache = field(init=False)
    keeps_logits: bool = field(init=False)
    holes: bool = field(init=False)  # may masked slots lie between a row's cached tokens?

    def __post_init__(self) -> None:
        seq2seq = self.model.config.is_encoder_decoder
        self.cache = EncoderDecoderCache(DynamicCache(), DynamicCache()) if seq2seq else DynamicCache()
        self.keeps_logits = accepts_logits_to_keep(self.model)
        # decoder-only models take position ids; T5's relative positions are slot distances
        self.holes = not seq2seq

    @classmethod
    def start(
        cls,
        model: PreTrainedModel,
        input_ids: torch.Tensor,
        mask: torch.Tensor,
        lean: bool = False,
        hidden_layers: tuple[int, ...] = (),
        pack_plain: bool = True,
    ) -> RowCache:
        """An empty cache for B rows; for seq2seq models the encoder runs here on input_ids [B, S]. `lean`:
        step the model by `LeanLlama` where `supports_lean_step` (as `generate` steps it), `pack_plain` as
        `osd.spec.lean_llama.product_kind`'s (True for a draft, False for a target, which keeps its layout);
        hidden_layers: keep those layers' input states at each forward (`features`, the target's for a head)."""
        B, device = input_ids.shape[0], model.device
        empty = (torch.zeros(B, 0, dtype=torch.long, device=device), torch.zeros(B, dtype=torch.long))
        if not model.config.is_encoder_decoder:
            step = LeanLlama(model, pack_plain, hidden_layers) if lean and supports_lean_step(model) else None
            return cls(model, None, None, *empty, step, hidden_layers)
        ids, mask = input_ids.to(device), mask.to(device)
        return cls(model, model.get_encoder()(input_ids=ids, attention_mask=mask), mask, *empty)

    @property
    def width(self) -> int:
        return self.valid.shape[1]

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor, num_logits: int) -> torch.Tensor:
        """Feed tokens [B, u] (mask [B, u]: 0 at padding) after the cache; logits [B, num_logits, V]."""
        device = self.model.device
        tokens, mask = tokens.to(device), mask.to(device)
        attention = torch.cat([self.valid, mask], 1)  # [B, W + u]
        positions = (self.lengths.to(device)[:, None] + mask.cumsum(1) - 1).clamp(min=0)  # [B, u]
        if self.lean is not None:
            mask_4d = _slot_mask(attention, tokens.shape[1])
            logits = self.lean.forward(tokens, positions, mask_4d, self._store, num_logits)
            if self.hidden_layers:
                self.features = self.lean.features
        else:
            logits = self._hf_forward(tokens, attention, positions, num_logits)
        self.valid, self.lengths = attention, self.lengths + mask.sum(1).cpu()
        return logits

    def _hf_forward(
        self, tokens: torch.Tensor, attention: torch.Tensor, positions: torch.Tensor, num_logits: int
    ) -> torch.Tensor:
        """HF's forward of tokens [B, u] over the slots `attention` [B, W + u] marks (position ids [B, u]: T5's
        relative positions ignore them); logits [B, num_logits, V]."""
        kwargs = {"past_key_values": self.cache, "use_cache": True}
        if self.keeps_logits:
            kwargs["logits_to_keep"] = num_logits
        if self.hidden_layers:
            kwargs["output_hidden_states"] = True
        if self.encoder_outputs is not None:
            out = self.model(
                encoder_outputs=self.encoder_outputs,
                attention_mask=self.encoder_mask,
                decoder_input_ids=tokens,
                decoder_attention_mask=attention,
                **kwargs,
            )
        else:
            out = self.model(input_ids=tokens, attention_mask=attention, position_ids=positions, **kwargs)
        self.cache = out.past_key_values
        if self.hidden_layers:
            self.features = layer_inputs(out.hidden_states, self.hidden_layers)
        return out.logits[:, -num_logits:]

    def _store(
        self, layer: int, keys: torch.Tensor, values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the fed tokens' keys and values [B, kv heads, u, D] to the layer's slots."""
        return self.cache.update(keys, values, layer)

    def keep(self, keep: torch.Tensor, rows: torch.Tensor | None = None) -> None:
        """Row i keeps its first keep[i] cached tokens; with `rows`, only those rows stay. The slots of
        dropped tokens are masked (trailing ones cropped); the cache is compacted when they waste
        more than `SLACK` of its width, or at once where holes are not allowed."""
        if rows is not None and len(rows) < len(self.lengths):
            self._select_rows(rows)
            keep, self.lengths = keep[rows], self.lengths[rows]
        if len(keep) == 0 or bool((keep == self.lengths).all()):
            return
        kept = self.valid.cumsum(1) <= keep.to(self.valid.device)[:, None]  # [B, W]
        self.valid, self.lengths = self.valid * kept, keep.clone()
        used = self.valid.any(0).nonzero()  # slots any row still uses
        width = int(used[-1]) + 1 if len(used) else 0
        if width < self.width:  # no row uses the tail: crop it
            self.cache.crop(width - self.width)
            self.valid = self.valid[:, :width]
        if self.holes:
            if self.width - int(self.lengths.max()) > SLACK * self.width:
                self._compact()
        elif not self.valid.equal(self._right_aligned()):
            self._compact()

    def _right_aligned(self) -> torch.Tensor:
        """The mask [B, W] of every row's cached tokens in its last slots."""
        slots = torch.arange(self.width, device=self.valid.device)
        return (slots[None, :] >= self.width - self.lengths.to(self.valid.device)[:, None]).long()

    def _compact(self) -> None:
        """Move every row's cached tokens, in order, to the last slots; the width becomes the longest row's."""
        # a stable sort of the 0/1 mask puts a row's masked slots first and its cached ones, in order, last
        width = int(self.lengths.max())
        order = self.valid.sort(stable=True, dim=1).indices[:, self.width - width :]  # [B, W']
        self.valid = self.valid.gather(1, order)
        for layer in self._self_attention_layers():
            idx = order.to(layer.keys.device)[:, None, :, None]
            layer.keys = layer.keys.gather(2, idx.expand(-1, layer.keys.shape[1], -1, layer.keys.shape[3]))
            layer.values = layer.values.gather(
                2, idx.expand(-1, layer.values.shape[1], -1, layer.values.shape[3])
            )

    def _self_attention_layers(self) -> list:
        cache = self.cache.self_attention_cache if isinstance(self.cache, EncoderDecoderCache) else self.cache
        return [layer for layer in cache.layers if layer.keys is not None and layer.keys.numel()]

    def _select_rows(self, rows: torch.Tensor) -> None:
        rows = rows.to(self.model.device)
        self.cache.batch_select_indices(rows)
        self.valid = self.valid[rows]
        if self.encoder_outputs is not None:
            self.encoder_outputs = BaseModelOutput(
                last_hidden_state=self.encoder_outputs.last_hidden_state[rows]
            )
            self.encoder_mask = self.encoder_mask[rows]

    def feed_unseen(self, tokens: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """The committed tokens each row has not fed yet, as [B, u] ids and mask (u the same for all
        rows, each row's last token real). Rows with fewer unseen tokens are left-padded, where holes
        are allowed or the row's cache is empty; otherwise they drop their last cached ones (re-fed)."""
        lengths = torch.tensor([len(t) for t in tokens])  # [B]
        self.keep(torch.minimum(self.lengths, lengths - 1))  # at least one token to feed per row
        u = int((lengths - self.lengths).max())
        if not self.holes:
            self.keep(torch.minimum(self.lengths, (lengths - u).clamp(min=0)))
        ids = torch.full((len(tokens), u), PAD_ID, dtype=torch.long)
        mask = torch.zeros((len(tokens), u), dtype=torch.long)
        for i, (row, cached) in enumerate(zip(tokens, self.lengths.tolist(), strict=True)):
            unseen = row[cached:]
            ids[i, u - len(unseen) :] = torch.tensor(unseen)
            mask[i, u - len(unseen) :] = 1
        return ids, mask


def _slot_mask(attention: torch.Tensor, u: int) -> torch.Tensor:
    """[B, 1, u, W + u] True where the i-th of the u fed tokens may attend: the row's cached slots and the fed
    ones up to its own (attention [B, W + u], 1 at those slots). A padded fed token attends to its own slot
    whatever the mask says, so that no query row is empty: what an attention kernel makes of an empty row
    (zeros here, NaN on some) never reaches the cache."""
    width = attention.shape[1]
    slots = torch.arange(width, device=attention.device)  # [W + u]
    own = (width - u) + torch.arange(u, device=attention.device)  # [u] the fed tokens' slots
    allowed = attention.bool()[:, None, :] & (slots[None, :] <= own[:, None])[None]  # [B, u, W + u]
    return (allowed | (slots[None, :] == own[:, None])[None])[:, None]
