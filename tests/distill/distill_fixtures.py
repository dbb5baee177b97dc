"""Builders for tests/distill: a tiny tokenizer, tiny random Llama-like and T5 models, a tiny conversation file."""

from __future__ import annotations

import json

import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast, T5ForConditionalGeneration

from tests.tiny_models import tiny_llama, tiny_t5_config, tiny_tokenizer

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]
WORDS = (
    "A chat between a curious user and an artificial intelligence assistant . The gives helpful , detailed "
    "polite answers to the 's questions USER : ASSISTANT what is one two three four five plus minus "
    "select from table where sum of it equals yes no"
).split()
VOCAB = 64


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Word-level over SPECIALS + WORDS (pad 0, bos 1, eos 2, unk 3), `<s>` prepended."""
    tokenizer = tiny_tokenizer(SPECIALS + WORDS)
    assert len(tokenizer) <= VOCAB, len(tokenizer)
    return tokenizer


def llama(layers: int, hidden: int, seed: int) -> LlamaForCausalLM:
    """A random Llama over the fixture vocabulary, its head scaled by 4: sharper logits, fewer argmax
    near-ties, more varied greedy outputs."""
    return tiny_llama(VOCAB, layers, hidden, seed=seed, head_scale=4.0)


def t5(layers: int, d_model: int, seed: int) -> T5ForConditionalGeneration:
    torch.manual_seed(seed)
    config = tiny_t5_config(VOCAB, layers, d_model)
    model = T5ForConditionalGeneration(config).eval()
    # a random T5 with tied embeddings just copies its decoder input (greedy: pad forever);
    # an untied random head makes it generate varied tokens
    config.tie_word_embeddings = False
    model.lm_head = torch.nn.Linear(d_model, VOCAB, bias=False)
    return model


QUERIES = [
    "what is one plus two",
    "select sum from table",
    "what is four minus three plus five",
    "is it yes",
    "two plus two equals",
    "select it from table where one equals one",
]
ANSWERS = ["three", "select sum of it", "six", "yes", "four", "select it"]


def write_conversations(path, with_answers: bool = True, groups: bool = True) -> str:
    records = []
    for i, (q, a) in enumerate(zip(QUERIES, ANSWERS, strict=True)):
        conv = [{"role": "user", "content": q}] + (
            [{"role": "assistant", "content": a}] if with_answers else []
        )
        record = {"id": f"r{i}", "conversation": conv}
        if groups:
            record["dataset"] = "sql" if q.startswith("select") else "math"
        records.append(record)
    path.write_text(json.dumps(records))
    return str(path)


def save_pair(
    folder, build=None, student_tokenizer: PreTrainedTokenizerFast | None = None
) -> tuple[str, str]:
    """(student, teacher) saved as model folders with the tokenizer, for `osd.train` on the command line;
    `build(layers, width, seed)` makes each model (default `llama`; `t5` for an encoder-decoder pair);
    `student_tokenizer` replaces the student's."""
    build = build or llama
    tokenizer = build_tokenizer()
    paths = []
    for name, model, tok in (
        ("student", build(1, 16, seed=1), student_tokenizer or tokenizer),
        ("teacher", build(2, 32, seed=0), tokenizer),
    ):
        model.save_pretrained(folder / name)
        tok.save_pretrained(folder / name)
        paths.append(str(folder / name))
    return paths[0], paths[1]


def cli_argv(student: str, teacher: str, data: str, out, *extra: str, batch_size: int = 3) -> list[str]:
    """osd.train flags for a tiny run: alpha on 2 records, a checkpoint every 2 steps."""
    return [
        "--student_model_path", student, "--teacher_model_path", teacher, "--data_path", data,
        "--eval_data_path", data, "--output_dir", str(out), "--report_to", "none", "--max_new_tokens", "6",
        "--per_device_train_batch_size", str(batch_size), "--logging_steps", "1", "--save_steps", "2",
        "--learning_rate", "1e-2", "--disable_tqdm", "True", "--max_eval_samples", "2", *extra,
    ]  # fmt: skip
