"""An EAGLE-3 head's KV cache inside the engine: `HeadRows` over a batch's rows, `HeadSequence` over one sequence.

Symbols: B rows, u fed positions, K H the width of the target's concatenated states (`Eagle3Head.fuse`).

Slot j of a row holds the head's entry j, which read committed token j + 1 with the target's feature at position
j (`osd.spec.eagle3`): the head's token sequence is the committed one without its first token, so `RowCache`'s
slots, masks, compaction and rows leaving serve it unchanged. After each verification the engine hands over the
target's states at the positions it has just committed (`add_features`: the committed tokens it fed, and the
accepted proposals). The first forward of the next draft chain reads them, one entry per committed token the
head has not read; the chain's later forwards read the head's own last output state instead, and their entries
are dropped at the next `keep`: an entry stays only if it read the target's feature (`backed`), so the head's
cache always ends where the target's features do. Before the target's first pass (the prompt's prefill) the
head has no feature and proposes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from osd.spec.batched import RowCache
from osd.spec.eagle3 import Eagle3Head
from osd.spec.lean_llama import KVStore


class HeadStep:
    """The head's forward as `RowCache`'s lean step; `inputs` [B, u, H] (its input states) are set before each call."""

    def __init__(self, head: Eagle3Head, embed: nn.Module) -> None:
        self.head, self.embed = head, embed  # embed: the target's input embedding
        self.inputs: torch.Tensor | None = None  # [B, u, H]
        self.states: torch.Tensor | None = None  # [B, u, H] the last call's output states

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | None,
        store: KVStore,
        num_logits: int,
    ) -> torch.Tensor:
        """Feed tokens [B, u] at position ids [B, u]; logits of the last num_logits [B, num_logits, V]."""
        embeds = self.embed(tokens.to(self.embed.weight.device)).to(self.head.device)  # [B, u, H]
        self.states = self.head(embeds, self.inputs, positions, mask, store)
        return self.head.full_logits(self.states[:, -num_logits:])


@dataclass
class HeadRows(RowCache):
    """`RowCache` of an EAGLE-3 head (module docstring); `lean` is its `HeadStep`."""

    # per row: the target's features [P_i, K H] not read yet
    pending: list[torch.Tensor] = field(default_factory=list)
    # [B] entries that read the target's features (the rest: a chain's, which read the head's own states)
    backed: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))

    @classmethod
    def begin(cls, head: Eagle3Head, embed: nn.Module, rows: int) -> HeadRows:
        """An empty cache for `rows` rows; `embed` is the target's input embedding."""
        valid = torch.zeros(rows, 0, dtype=torch.long, device=head.device)  # [B, 0]
        lengths = torch.zeros(rows, dtype=torch.long)
        width = len(head.target_layers) * head.config.hidden_size
        pending = [torch.zeros(0, width, dtype=head.fc.weight.dtype, device=head.device) for _ in range(rows)]
        step = HeadStep(head, embed)
        return cls(head, None, None, valid, lengths, step, pending=pending, backed=lengths.clone())

    def add_features(self, features: torch.Tensor, committed: torch.Tensor) -> None:
        """The target's states [B, m, K H] at the m positions it just verified; committed [B, m] bool marks those
        of committed tokens (left padding and rejected proposals are not)."""
        rows = zip(self.pending, features, committed.to(features.device), strict=True)
        self.pending = [torch.cat([p, f[c].to(p)]) for p, f, c in rows]

    def feed_unseen(self, tokens: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """`RowCache.feed_unseen` of the head's token sequences: the committed ones without their first token."""
        return super().feed_unseen([row[1:] for row in tokens])

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor, num_logits: int) -> torch.Tensor:
        """Feed tokens [B, u] (mask [B, u]) reading the pending target features, or (a chain's later step, u = 1)
        the head's own last output state; logits [B, num_logits, V]."""
        fed = mask.sum(1).cpu()  # [B]
        waiting = torch.tensor([len(p) for p in self.pending])  # [B]
        if waiting.any():
            assert waiting.equal(fed), f"features for {waiting.tolist()} entries, {fed.tolist()} tokens fed"
            features = self.pending[0].new_zeros(*mask.shape, self.pending[0].shape[-1])  # [B, u, K H]
            features[mask.bool().to(features.device)] = torch.cat(self.pending)
            self.lean.inputs = self.model.fuse(features)
            self.backed = self.backed + fed
            self.pending = [p[:0] for p in self.pending]
        else:
            assert tokens.shape[1] == 1 and self.lean.states is not None, f"a chain step fed {tokens.shape}"
            self.lean.inputs = self.lean.states[:, -1:]
        return super().forward(tokens, mask, num_logits)

    def keep(self, keep: torch.Tensor, rows: torch.Tensor | None = None) -> None:
        """`RowCache.keep`, never beyond the entries that read the target's features (a chain's entries read the
        head's own states and are read again from the target's at the next chain)."""
        keep = torch.minimum(keep, self.backed)
        self.backed = keep.clone()
        if rows is not None and len(rows) < len(self.lengths):
            self.pending = [self.pending[i] for i in rows.tolist()]
            self.backed = self.backed[rows]
        super().keep(keep, rows)


class HeadSequence:
    """The head over one sequence: `CachedModel`'s interface (forward, crop, len) for `generate`, on a one-row
    `HeadRows`."""

    def __init__(self, head: Eagle3Head, embed: nn.Module) -> None:
        self.rows = HeadRows.begin(head, embed, 1)

    @property
    def device(self) -> torch.device:
        return self.rows.model.device

    def __len__(self) -> int:
        """Committed tokens read: entry i read token i + 1 (and token 0 through the target's feature at 0)."""
        return int(self.rows.lengths[0]) + 1

    def forward(self, tokens: torch.Tensor, num_logits: int) -> torch.Tensor:
        """Feed tokens [1, n] after the cache; logits of the last num_logits [num_logits, V]."""
        return self.rows.forward(tokens, torch.ones_like(tokens), num_logits)[0]

    def crop(self, length: int) -> None:
        """Keep what read the first `length` committed tokens (and the target's features)."""
        self.rows.keep(torch.tensor([length - 1]))

    def add_features(self, features: torch.Tensor) -> None:
        """The target's states [1, m, K H] at the m committed positions it just verified."""
        self.rows.add_features(features, torch.ones(features.shape[:2], dtype=torch.bool))
