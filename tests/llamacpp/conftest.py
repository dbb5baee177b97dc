"""Fixtures for the llama.cpp tools' tests (no build needed: they read recorded runs)."""

from __future__ import annotations

import pytest
from llamacpp_recorded import FIXTURES
from transformers import AutoTokenizer


@pytest.fixture(scope="session")
def fixture_tokenizer():
    """The 1000-piece SentencePiece tokenizer of the dev pair, with its chat template removed."""
    tok = AutoTokenizer.from_pretrained(FIXTURES / "tokenizer")
    tok.chat_template = None
    return tok
