"""The prompt llama-osd-stream builds equals the Python side's (osd.prompting), text and token ids."""

from __future__ import annotations

import json

import pytest
from llamacpp_recorded import RECORDED, recorded_paths, recorded_tokenizer

from llamacpp_patches.prompts import PLACEHOLDER, osd_template, render, template_mismatches
from osd.conversations import load_conversations, user_query
from osd.prompting import PLAIN_TEMPLATE, encode_prompt, prompt_text

QUERIES = [
    "What is 2 + 2?",
    "  leading spaces and {braces} stay",
    "SELECT * FROM t; -- sql\nsecond line",
    "ünïcödé ✓",
]
CHAT = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@pytest.mark.parametrize("query", QUERIES)
def test_plain_template_renders_the_vicuna_prompt(fixture_tokenizer, query):
    template = osd_template(fixture_tokenizer)
    assert template == PLAIN_TEMPLATE.replace("{query}", PLACEHOLDER)
    assert render(template, query) == prompt_text(fixture_tokenizer, query)


@pytest.mark.parametrize("query", QUERIES)
def test_chat_template_renders_the_chat_prompt(fixture_tokenizer, query):
    tok = fixture_tokenizer
    tok.chat_template = CHAT
    try:
        template = osd_template(tok)
        assert template.startswith(tok.bos_token) and template.count(PLACEHOLDER) == 1
        assert render(template, query) == prompt_text(tok, query)
    finally:
        tok.chat_template = None


def test_a_template_that_drops_the_query_is_rejected(fixture_tokenizer):
    fixture_tokenizer.chat_template = "{% for m in messages %}[{{ m['role'] }}]{% endfor %}"
    try:
        with pytest.raises(ValueError, match="exactly once"):
            osd_template(fixture_tokenizer)
    finally:
        fixture_tokenizer.chat_template = None


def test_a_template_that_transforms_the_query_is_reported(fixture_tokenizer):
    # `trim` makes a fixed slot wrong exactly for the queries with surrounding spaces
    fixture_tokenizer.chat_template = "{% for m in messages %}U: {{ m['content'] | trim }}{% endfor %} A:"
    try:
        records = [{"conversation": [{"role": "user", "content": q}]} for q in QUERIES]
        template = osd_template(fixture_tokenizer)
        assert template_mismatches(fixture_tokenizer, template, records) == [1]
    finally:
        fixture_tokenizer.chat_template = None


@pytest.mark.parametrize("name", RECORDED)
def test_llamacpp_prompt_ids_equal_encode_prompt(name):
    """The ids llama.cpp served (recorded with --osd-dump-ids) equal osd.prompting.encode_prompt.

    `prompt_from == "template"`: llama.cpp rendered --osd-template and tokenized it itself, so this
    compares the two tokenizers; "record": it served the driver's ids, so this checks the plumbing.
    """
    paths = recorded_paths(name)
    tok = recorded_tokenizer(name)
    records = load_conversations(paths["queries.json"])
    lines = [json.loads(x) for x in paths["stream.jsonl"].read_text().splitlines()]
    assert len({x["index"] for x in lines}) == len(records)
    for x in lines:
        assert x["prompt_ids"] == encode_prompt(tok, user_query(records[x["index"]])), (name, x["id"])
        assert x["prompt_tokens"] == len(x["prompt_ids"])
        assert x["prompt_ids"].count(tok.bos_token_id) == 1


def test_some_recorded_run_lets_llamacpp_tokenize_the_template():
    # otherwise the test above would only check that the driver's ids were echoed back
    froms = {
        json.loads(line)["prompt_from"] for n in RECORDED for line in recorded_paths(n)["stream.jsonl"].open()
    }
    assert "template" in froms
