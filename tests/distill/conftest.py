"""Fixtures for tests/distill (builders in distill_fixtures.py and online_fixtures.py, on tests/tiny_models.py)."""

from __future__ import annotations

import pytest
import torch
from distill_fixtures import build_tokenizer, llama, save_pair, t5, write_conversations
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast, T5ForConditionalGeneration


@pytest.fixture
def tokenizer() -> PreTrainedTokenizerFast:
    return build_tokenizer()


@pytest.fixture
def llama_pair() -> tuple[LlamaForCausalLM, LlamaForCausalLM]:
    """(student, teacher) sharing the tokenizer's vocabulary."""
    return llama(1, 16, seed=1), llama(2, 32, seed=0)


@pytest.fixture
def t5_pair() -> tuple[T5ForConditionalGeneration, T5ForConditionalGeneration]:
    return t5(1, 16, seed=1), t5(2, 32, seed=0)


@pytest.fixture
def conversation_file(tmp_path) -> str:
    return write_conversations(tmp_path / "train.json")


@pytest.fixture
def saved_pair(tmp_path) -> tuple[str, str]:
    """(student, teacher) model folders, as `osd.train` loads them."""
    return save_pair(tmp_path)


@pytest.fixture
def one_thread():
    """Tiny models: threads only add synchronisation, which stalls on a shared 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
