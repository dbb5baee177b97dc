"""The committed demo pair: loads with from_pretrained, is small, and decodes like HF generate."""

from __future__ import annotations

import pytest
import torch

from osd.conversations import load_conversations, user_query
from osd.demo import DRAFT_PATH, TEACHER_PATH, load_demo_pair, workload_path
from osd.prompting import encode_prompt
from osd.spec import SpeculativeDecoder


@pytest.fixture(scope="module")
def pair():
    return load_demo_pair()


def test_pair_loads_as_float32_with_shared_vocabulary(pair):
    draft, teacher, tok = pair
    assert draft.dtype == teacher.dtype == torch.float32
    assert draft.config.vocab_size == teacher.config.vocab_size == len(tok)
    # The draft is the shallow one: depth, not width, sets its step time.
    assert draft.config.num_hidden_layers < teacher.config.num_hidden_layers


def test_committed_weights_stay_small():
    size = sum(p.stat().st_size for d in (TEACHER_PATH, DRAFT_PATH) for p in d.glob("*.safetensors"))
    assert 0 < size <= 40 * 2**20


@pytest.mark.parametrize("domain", ["sql", "finance"])
def test_greedy_speculative_output_equals_teacher_generate(pair, domain):
    """Greedy SD must reproduce the target's own greedy output token for token (HF generate is the reference)."""
    draft, teacher, tok = pair
    ids = torch.tensor([encode_prompt(tok, user_query(load_conversations(workload_path(domain, "eval"))[0]))])
    expected = teacher.generate(
        ids, max_new_tokens=24, do_sample=False, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    )[0, ids.shape[1] :]
    out = SpeculativeDecoder(draft, teacher, gamma=5).generate(
        ids, max_new_tokens=24, eos_token_id=tok.eos_token_id
    )
    assert out.generated_ids[0].tolist() == expected.tolist()
    assert 0.0 <= out.alpha <= 1.0
