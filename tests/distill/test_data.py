"""Tokenization, prompt masking, padding, and errors that name the bad record."""

from __future__ import annotations

import json

import pytest
import torch
from distill_fixtures import ANSWERS, QUERIES, write_conversations

from osd.conversations import ConversationFormatError
from osd.distill.data import (
    IGNORE_INDEX,
    ConversationDataset,
    DistillCollator,
    make_train_batch,
    responses_from_labels,
    truncate_prompt,
    unpad,
)
from osd.prompting import encode_answer, encode_prompt


def test_item_masks_the_prompt_and_keeps_the_answer(tokenizer, conversation_file):
    ds = ConversationDataset(conversation_file, tokenizer, model_max_length=128)
    item = ds[1]
    prompt = encode_prompt(tokenizer, QUERIES[1])
    answer = encode_answer(tokenizer, ANSWERS[1])
    assert item["prompt_ids"] == prompt and prompt[0] == tokenizer.bos_token_id
    assert item["input_ids"] == prompt + answer and answer[-1] == tokenizer.eos_token_id
    assert item["labels"] == [IGNORE_INDEX] * len(prompt) + answer
    assert item["dataset"] == "sql" and item["index"] == 1


def test_collated_batch_counts_exactly_the_response_tokens(tokenizer, conversation_file):
    ds = ConversationDataset(conversation_file, tokenizer, model_max_length=128)
    items = [ds[i] for i in range(4)]
    batch = DistillCollator(tokenizer.pad_token_id)(items)
    # prompts left-padded for generation
    assert unpad(batch["prompt_ids"], batch["prompt_attention_mask"]) == [it["prompt_ids"] for it in items]
    assert (batch["prompt_attention_mask"][:, -1] == 1).all()
    # training tokens right-padded; the logits at t predict input_ids[t + 1], a response token
    assert unpad(batch["input_ids"], batch["attention_mask"]) == [it["input_ids"] for it in items]
    answer_lengths = [len(encode_answer(tokenizer, ANSWERS[i])) for i in range(4)]
    assert batch["loss_mask"].sum(1).tolist() == answer_lengths
    for row in range(4):
        predicted = batch["input_ids"][row, 1:][batch["loss_mask"][row, :-1]].tolist()
        assert predicted == encode_answer(tokenizer, ANSWERS[row])
    assert batch["dataset"] == ["math", "sql", "math", "math"]


def test_records_without_answers_give_prompts_only(tokenizer, tmp_path):
    path = write_conversations(tmp_path / "q.json", with_answers=False, groups=False)
    ds = ConversationDataset(path, tokenizer)
    batch = DistillCollator(tokenizer.pad_token_id)([ds[0], ds[1]])
    assert "labels" not in batch and "dataset" not in batch and "prompt_ids" in batch


def test_encoder_decoder_batch_is_teacher_forced():
    prompts, responses = [[5, 6, 2], [7, 2]], [[9, 10, 11, 2], [12, 2]]
    batch = make_train_batch(
        prompts, responses, pad_token_id=0, is_encoder_decoder=True, decoder_start_token_id=0
    )
    assert batch["input_ids"].tolist() == [[5, 6, 2], [7, 2, 0]]
    assert batch["decoder_input_ids"].tolist() == [[0, 9, 10, 11], [0, 12, 0, 0]]
    assert batch["labels"].tolist() == [[9, 10, 11, 2], [12, 2, -100, -100]]
    assert torch.equal(batch["loss_mask"], batch["labels"] != IGNORE_INDEX)
    assert responses_from_labels(batch["labels"]) == responses


def test_encoder_decoder_dataset_uses_the_bare_query(tokenizer, conversation_file):
    item = ConversationDataset(conversation_file, tokenizer, is_encoder_decoder=True)[0]
    assert item["prompt_ids"] == tokenizer(QUERIES[0]).input_ids
    assert item["labels"] == encode_answer(tokenizer, ANSWERS[0])


def test_truncation_keeps_bos_and_the_prompt_end(tokenizer, tmp_path):
    long_query = " ".join(["one two three"] * 40)
    path = tmp_path / "long.json"
    path.write_text(
        json.dumps(
            [
                {
                    "conversation": [
                        {"role": "user", "content": long_query},
                        {"role": "assistant", "content": "yes no yes"},
                    ]
                }
            ]
        )
    )
    item = ConversationDataset(path, tokenizer, model_max_length=32)[0]
    full = encode_prompt(tokenizer, long_query)
    assert len(item["input_ids"]) <= 32 and len(item["prompt_ids"]) <= 31
    assert (
        item["prompt_ids"][0] == full[0]
        and item["prompt_ids"][1:] == full[len(full) - len(item["prompt_ids"]) + 1 :]
    )
    assert truncate_prompt([1, 2, 3], 5) == [1, 2, 3] and truncate_prompt([1, 2, 3, 4, 5], 3) == [1, 4, 5]


def test_malformed_record_names_file_and_index(tokenizer, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(
        json.dumps(
            [{"conversation": [{"role": "user", "content": "ok"}]}, {"conversation": [{"role": "bot"}]}]
        )
    )
    with pytest.raises(ConversationFormatError, match=r"bad\.json, record 1"):
        ConversationDataset(path, tokenizer)
