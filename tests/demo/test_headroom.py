"""The forward KL of the headroom loop, against torch.distributions."""

from __future__ import annotations

import torch

from osd.demo.headroom import forward_kl
from osd.distill.lm_training import IGNORE


def test_forward_kl_matches_distributions_on_label_positions_only():
    gen = torch.Generator().manual_seed(0)
    draft, teacher = torch.randn(2, 5, 7, generator=gen), torch.randn(2, 5, 7, generator=gen)  # [B, T, V]
    labels = torch.tensor([[IGNORE, IGNORE, 3, 4, 1], [IGNORE, 2, 2, IGNORE, IGNORE]])  # [B, T]
    # Position t predicts label t+1, so the positions counted are (0,1), (0,2), (0,3) and (1,0), (1,1).
    positions = [(0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]
    expected = torch.stack(
        [
            torch.distributions.kl_divergence(
                torch.distributions.Categorical(logits=teacher[b, t]),
                torch.distributions.Categorical(logits=draft[b, t]),
            )
            for b, t in positions
        ]
    ).mean()
    torch.testing.assert_close(forward_kl(draft, teacher, labels), expected, rtol=1e-5, atol=1e-6)


def test_forward_kl_is_zero_for_identical_models():
    logits = torch.randn(1, 4, 9, generator=torch.Generator().manual_seed(1))
    labels = torch.tensor([[IGNORE, 1, 2, 3]])
    torch.testing.assert_close(
        forward_kl(logits, logits.clone(), labels), torch.tensor(0.0), atol=1e-6, rtol=0
    )
