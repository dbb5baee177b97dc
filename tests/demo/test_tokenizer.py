"""The tiny pair's tokenizer: special tokens, lossless round trips, the short chat template."""

from __future__ import annotations

import pytest
import sentencepiece as spm
from transformers import AutoTokenizer

from osd.conversations import assistant_answer, load_conversations, user_query
from osd.paths import DOMAINS, TINY_DRAFT_PATH, TINY_TEACHER_PATH, workload_path
from osd.prompting import encode_answer, encode_prompt


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(TINY_TEACHER_PATH)


def test_special_tokens_are_distinct_and_set(tok):
    ids = [tok.bos_token_id, tok.eos_token_id, tok.pad_token_id, tok.unk_token_id]
    assert None not in ids and len(set(ids)) == 4


def test_answers_round_trip_in_every_domain(tok):
    for domain in DOMAINS:
        for rec in load_conversations(workload_path(domain, "eval")):
            answer = assistant_answer(rec)
            ids = encode_answer(tok, answer)
            assert ids[-1] == tok.eos_token_id
            assert tok.decode(ids, skip_special_tokens=True) == answer, rec["id"]


def test_unseen_characters_fall_back_to_bytes(tok):
    text = "naïve café ∑ 東京 🙂"
    assert tok.unk_token_id not in tok(text).input_ids
    assert tok.decode(tok(text, add_special_tokens=False).input_ids) == text


def test_prompt_has_one_bos_and_ends_with_the_assistant_cue(tok):
    ids = encode_prompt(tok, user_query(load_conversations(workload_path("math", "eval"))[0]))
    assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1
    assert tok.decode(ids, skip_special_tokens=True).endswith("\nASSISTANT:")


def test_both_model_folders_carry_the_same_sentencepiece_model():
    """llama.cpp's convert_hf_to_gguf.py reads tokenizer.model; both folders must have the same one."""
    teacher, draft = (
        (TINY_TEACHER_PATH / "tokenizer.model").read_bytes(),
        (TINY_DRAFT_PATH / "tokenizer.model").read_bytes(),
    )
    assert teacher == draft
    sp = spm.SentencePieceProcessor(model_file=str(TINY_TEACHER_PATH / "tokenizer.model"))
    assert sp.piece_to_id("<0x0A>") != sp.unk_id()  # byte fallback pieces exist
    assert (sp.bos_id(), sp.eos_id(), sp.pad_id()) == (1, 2, 3)
