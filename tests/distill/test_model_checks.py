"""Errors that say what is wrong where `python -m osd.train` loads its models and data: a missing
model path, a student with another tokenizer of the same size, an empty data file, a training
length past the context, and online prompts that leave no room to serve."""

from __future__ import annotations

import json
import shutil

import pytest
from distill_fixtures import SPECIALS, WORDS, build_tokenizer, save_pair, write_conversations
from transformers import PreTrainedTokenizerFast

from osd.conversations import ConversationFormatError
from osd.distill.callbacks import read_metrics
from osd.model_checks import check_model_path, tokenizer_difference
from osd.models import load_demo_pair
from osd.paths import TINY_DRAFT_PATH, TINY_TEACHER_PATH
from osd.train import main
from tests.tiny_models import tiny_tokenizer


def argv(student, teacher, data, out, *extra) -> list[str]:
    return [
        "--student_model_path", student, "--teacher_model_path", teacher, "--data_path", data,
        "--output_dir", str(out), "--report_to", "none", "--max_new_tokens", "6",
        "--per_device_train_batch_size", "1", "--logging_steps", "1", "--save_strategy", "no",
        "--disable_tqdm", "True", "--max_steps", "1", *extra,
    ]  # fmt: skip


def permuted_tokenizer() -> PreTrainedTokenizerFast:
    """The fixture tokenizer's vocabulary with two words' ids swapped: the same size, another tokenizer."""
    words = list(dict.fromkeys(SPECIALS + WORDS))
    i, j = words.index("plus"), words.index("minus")
    words[i], words[j] = words[j], words[i]
    return tiny_tokenizer(words)


def test_student_with_another_tokenizer_of_the_same_size_is_refused(tmp_path):
    other = permuted_tokenizer()
    assert len(other) == len(build_tokenizer())
    student, teacher = save_pair(tmp_path, student_tokenizer=other)
    data = write_conversations(tmp_path / "d.json")
    with pytest.raises(ValueError, match=r"different tokenizers: vocabularies differ .*'minus' is id") as err:
        main(argv(student, teacher, data, tmp_path / "o"))
    assert student in str(err.value) and teacher in str(err.value)


def test_demo_pair_loader_refuses_a_draft_with_another_tokenizer(tmp_path):
    draft = tmp_path / "draft"
    shutil.copytree(TINY_DRAFT_PATH, draft, ignore=shutil.ignore_patterns("tokenizer*", "chat_template*"))
    build_tokenizer().save_pretrained(draft)
    with pytest.raises(
        ValueError, match=rf"different tokenizers: vocabularies differ \({len(build_tokenizer())} vs 3072"
    ):
        load_demo_pair(draft, TINY_TEACHER_PATH)


def test_special_ids_are_part_of_the_tokenizer():
    a, b = build_tokenizer(), build_tokenizer()
    assert tokenizer_difference(a, b) is None
    b.eos_token = "<unk>"
    assert tokenizer_difference(a, b) == f"eos_token_id {a.eos_token_id} vs {b.unk_token_id}"
    b = build_tokenizer()
    b.pad_token = None  # osd.train pads with unk or eos: a pad set on one side only is no difference
    assert tokenizer_difference(a, b) is None


def test_missing_model_path_names_the_path(tmp_path):
    student, teacher = save_pair(tmp_path)
    data = write_conversations(tmp_path / "d.json")
    missing = str(tmp_path / "runs" / "no_such_draft")
    with pytest.raises(FileNotFoundError, match=f"model path {missing}: no such folder"):
        main(argv(missing, teacher, data, tmp_path / "o"))
    check_model_path("JackFram/llama-160m")  # a hub id is left to the hub


def test_empty_data_file_names_the_file(tmp_path):
    student, teacher = save_pair(tmp_path)
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    with pytest.raises(ConversationFormatError, match=r"empty\.json: 0 records"):
        main(argv(student, teacher, str(empty), tmp_path / "o"))


def test_model_max_length_past_the_context_is_refused(tmp_path):
    student, teacher = save_pair(tmp_path)  # max_position_embeddings 256
    data = write_conversations(tmp_path / "d.json")
    with pytest.raises(
        ValueError, match=r"--model_max_length 1024 exceeds the student's context of 256 .* 256 or less"
    ):
        main(argv(student, teacher, data, tmp_path / "o", "--model_max_length", "1024"))


def test_online_prompt_near_the_context_leaves_room_to_serve(tmp_path):
    student, teacher = save_pair(tmp_path)
    long_query = " ".join(["what is one plus two"] * 80)  # about 400 tokens, past the 256 context
    path = tmp_path / "long.json"
    path.write_text(json.dumps([{"id": "long", "conversation": [{"role": "user", "content": long_query}]}]))
    out = tmp_path / "online"
    main(argv(student, teacher, str(path), out, "--mode", "online", "--model_max_length", "256",
              "--online_eval_interval", "1"))  # fmt: skip
    served = [m for m in read_metrics(out) if "alpha" in m]
    assert served and all(m["proposed"] > 0 and 0 <= m["alpha"] <= 1 for m in served)
