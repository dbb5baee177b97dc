"""data/generate_answer.py with a tiny random Llama and a word-level tokenizer (tests/tiny_models.py).

The reference answer of each record is HF `generate` on that prompt alone (no padding), cut at
the first EOS: batching with left padding must not change it, the last token must not be
dropped (the reference's bug), and an interrupted run resumed must lose and duplicate nothing.
"""

import json
import re
import shutil
from pathlib import Path

import generate_answer
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from osd.conversations import load_conversations, save_conversations, user_query
from osd.prompting import PLAIN_TEMPLATE, encode_prompt
from tests.tiny_models import tiny_llama, tiny_t5_config, tiny_tokenizer

WORDS = sorted(
    set(re.findall(r"\w+|[^\w\s]+", PLAIN_TEMPLATE.format(query="")))
)  # as pre_tokenizers.Whitespace splits
QUERY_WORDS = "how many apples does tom have if he buys three more red green blue cars".split()
MAX_NEW = 6
VOCAB = {"<unk>": 0, "<s>": 1, "</s>": 2}
for _w in WORDS + QUERY_WORDS:
    VOCAB.setdefault(_w, len(VOCAB))
WORDS_BY_ID = {i: w for w, i in VOCAB.items()}


QUERIES = [
    " ".join(QUERY_WORDS[(i * 3) % len(QUERY_WORDS) :][: 2 + i]) for i in range(7)
]  # different lengths


def greedy(model, tok, query: str, eos: list[int] | None) -> list[int]:
    """Greedy answer ids for one unpadded prompt, up to (not including) the first EOS."""
    ids = torch.tensor([encode_prompt(tok, query)])
    out = model.generate(ids, max_new_tokens=MAX_NEW, do_sample=False, eos_token_id=eos, pad_token_id=0)
    new = out[0, ids.shape[1] :].tolist()
    return new[: min((new.index(t) for t in eos or [] if t in new), default=len(new))]


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory) -> Path:
    tok = tiny_tokenizer(VOCAB, pad=None)
    model = tiny_llama(len(VOCAB), kv_heads=2, pad_token_id=None)
    # A random model never says </s>; make a word it emits in some answers but not all a second
    # EOS (as Llama-3's generation config lists several), so that some answers stop early.
    free = [greedy(model, tok, q, eos=None) for q in QUERIES]
    counts = {t: sum(t in ids[1:] for ids in free) for ids in free for t in ids[1:]}
    model.generation_config.eos_token_id = [2, next(t for t, c in counts.items() if 0 < c < len(QUERIES))]
    path = tmp_path_factory.mktemp("teacher")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture
def conversations(tmp_path) -> Path:
    recs = []
    for i, query in enumerate(QUERIES):
        conv = [{"role": "user", "content": query}] + (
            [{"role": "assistant", "content": "old answer"}] if i == 0 else []
        )
        recs.append({"id": f"q{i}", "conversation": conv, "dataset": "toy"})
    path = tmp_path / "toy_train.json"
    save_conversations(recs, path)
    return path


def reference_tokens(teacher_dir: Path, path: Path) -> list[list[int]]:
    """Each record's greedy answer ids from its unpadded prompt, up to (not including) EOS."""
    tok = PreTrainedTokenizerFast.from_pretrained(teacher_dir)
    model = LlamaForCausalLM.from_pretrained(teacher_dir).eval()
    eos = model.generation_config.eos_token_id
    return [greedy(model, tok, user_query(rec), eos) for rec in load_conversations(path)]


def reference_answers(teacher_dir: Path, path: Path) -> list[str]:
    tok = PreTrainedTokenizerFast.from_pretrained(teacher_dir)
    return [tok.decode(ids, skip_special_tokens=True).strip() for ids in reference_tokens(teacher_dir, path)]


def flags(teacher_dir: Path, path: Path) -> list[str]:
    return [
        "--filename",
        str(path),
        "--model",
        str(teacher_dir),
        "--batch_size",
        "3",
        "--max_new_tokens",
        str(MAX_NEW),
        "--dtype",
        "float32",
    ]


def test_batched_answers_match_unbatched_generate(teacher_dir, conversations):
    out = generate_answer.main(flags(teacher_dir, conversations))
    assert out == conversations.with_name("toy_train_with_answer.json")
    got = load_conversations(out)
    expected = reference_answers(teacher_dir, conversations)
    assert [r["conversation"][-1]["content"] for r in got] == expected
    tokens = reference_tokens(teacher_dir, conversations)
    full = [i for i, ids in enumerate(tokens) if len(ids) == MAX_NEW]
    assert full and len(full) < len(tokens)  # some answers run to max_new_tokens, others stop at EOS
    ends_in_word = [i for i in full if tokens[i][-1] > 2]  # special tokens are not decoded
    assert ends_in_word
    for i in ends_in_word:  # the reference dropped the last generated token
        assert got[i]["conversation"][-1]["content"].split()[-1] == WORDS_BY_ID[tokens[i][-1]]
    assert all(
        [t["role"] for t in r["conversation"]] == ["user", "assistant"] for r in got
    )  # old answer replaced
    assert [r["id"] for r in got] == [f"q{i}" for i in range(7)] and got[0]["dataset"] == "toy"
    assert not out.with_name("toy_train_with_answer.partial.jsonl").exists()


def test_interrupted_run_resumes_without_loss_or_duplicates(teacher_dir, conversations, monkeypatch):
    real = generate_answer.generate_batch
    seen: list[int] = []

    def dies_on_third_batch(model, tok, prompts, max_new_tokens):
        if len(seen) == 2:
            raise KeyboardInterrupt
        seen.append(len(prompts))
        return real(model, tok, prompts, max_new_tokens)

    monkeypatch.setattr(generate_answer, "generate_batch", dies_on_third_batch)
    with pytest.raises(KeyboardInterrupt):
        generate_answer.main(flags(teacher_dir, conversations))
    partial = conversations.with_name("toy_train_with_answer.partial.jsonl")
    lines = [json.loads(line) for line in partial.read_text().splitlines()]
    assert "settings" in lines[0] and len(lines[1:]) == 6  # two finished batches of 3 survive
    with partial.open("a") as f:
        f.write('{"index": 6, "id": "q6", "ans')  # a torn write of the batch in flight

    asked: list[int] = []

    def counting(model, tok, prompts, max_new_tokens):
        asked.append(len(prompts))
        return real(model, tok, prompts, max_new_tokens)

    monkeypatch.setattr(generate_answer, "generate_batch", counting)
    out = generate_answer.main(flags(teacher_dir, conversations))
    assert asked == [1]  # only the unanswered record is generated again
    got = load_conversations(out)
    assert [r["id"] for r in got] == [f"q{i}" for i in range(7)]
    assert [r["conversation"][-1]["content"] for r in got] == reference_answers(teacher_dir, conversations)


def interrupted_run(argv: list[str], monkeypatch, batches: int = 1) -> None:
    """Run generate_answer.main until `batches` batches are written, then interrupt it."""
    real = generate_answer.generate_batch
    seen: list[int] = []

    def dies(model, tok, prompts, max_new_tokens):
        if len(seen) == batches:
            raise KeyboardInterrupt
        seen.append(len(prompts))
        return real(model, tok, prompts, max_new_tokens)

    with monkeypatch.context() as m:
        m.setattr(generate_answer, "generate_batch", dies)
        with pytest.raises(KeyboardInterrupt):
            generate_answer.main(argv)


def test_partial_file_of_another_input_is_refused(teacher_dir, conversations, monkeypatch):
    interrupted_run(flags(teacher_dir, conversations), monkeypatch, batches=0)
    partial = conversations.with_name("toy_train_with_answer.partial.jsonl")
    with partial.open("a") as f:
        f.write(json.dumps({"index": 0, "id": "other0", "answer": "x"}) + "\n")
    with pytest.raises(ValueError, match="does not match the input records"):
        generate_answer.main(flags(teacher_dir, conversations))


def without_ids(path: Path, queries: list[str]) -> Path:
    save_conversations([{"conversation": [{"role": "user", "content": q}]} for q in queries], path)
    return path


def test_partial_file_of_another_input_without_ids_is_refused(teacher_dir, tmp_path, monkeypatch):
    """Issue 24, defect 5: records without `id`, resumed into one --output from another input, took
    the old answers ("88 already answered"); lines are now matched by the query's sha256."""
    first = without_ids(tmp_path / "sql.json", QUERIES[:4])
    other = without_ids(tmp_path / "math.json", QUERIES[3:])  # shares one query with the first
    out = ["--output", str(tmp_path / "answers.json")]
    interrupted_run([*flags(teacher_dir, first), *out], monkeypatch)  # one batch of 3 answered
    with pytest.raises(ValueError, match=r"answers\.partial\.jsonl, line 2: record None .* does not match"):
        generate_answer.main([*flags(teacher_dir, other), *out])


def test_records_without_ids_resume_by_content(teacher_dir, tmp_path, monkeypatch):
    path = without_ids(tmp_path / "toy.json", QUERIES)
    interrupted_run(flags(teacher_dir, path), monkeypatch)
    asked: list[int] = []
    real = generate_answer.generate_batch
    monkeypatch.setattr(
        generate_answer, "generate_batch", lambda m, t, p, n: asked.append(len(p)) or real(m, t, p, n)
    )
    out = generate_answer.main(flags(teacher_dir, path))
    assert sum(asked) == len(QUERIES) - 3  # the first batch's answers were kept
    got = [r["conversation"][-1]["content"] for r in load_conversations(out)]
    assert got == reference_answers(teacher_dir, path)


def test_partial_file_of_another_model_or_settings_is_refused(
    teacher_dir, conversations, tmp_path, monkeypatch
):
    interrupted_run(flags(teacher_dir, conversations), monkeypatch)
    partial = conversations.with_name("toy_train_with_answer.partial.jsonl")
    before = partial.read_text()
    other = tmp_path / "other_teacher"
    shutil.copytree(teacher_dir, other)
    with pytest.raises(
        ValueError, match=r"partial\.jsonl holds answers written with other settings: model"
    ) as err:
        generate_answer.main(flags(other, conversations))
    assert str(other) in str(err.value) and str(teacher_dir) in str(err.value)
    argv = flags(teacher_dir, conversations)
    argv[argv.index("--max_new_tokens") + 1] = str(MAX_NEW - 1)
    with pytest.raises(ValueError, match=f"max_new_tokens {MAX_NEW} \\(now {MAX_NEW - 1}\\)"):
        generate_answer.main(argv)
    assert partial.read_text() == before  # refused without touching the answers
    partial.write_text(json.dumps({"index": 0, "id": "q0", "answer": "x"}) + "\n")  # no settings line
    with pytest.raises(ValueError, match="records no settings"):
        generate_answer.main(flags(teacher_dir, conversations))


def test_prompt_longer_than_the_context_is_truncated_with_a_count(teacher_dir, tmp_path, monkeypatch, capsys):
    context = LlamaConfig.from_pretrained(teacher_dir).max_position_embeddings
    long_query = " ".join(QUERY_WORDS * (context // len(QUERY_WORDS) + 1))
    recs = [
        {"id": f"q{i}", "conversation": [{"role": "user", "content": q}]} for i, q in enumerate(QUERIES[:2])
    ]
    recs.append({"id": "long", "conversation": [{"role": "user", "content": long_query}]})
    path = tmp_path / "long.json"
    save_conversations(recs, path)
    tok = PreTrainedTokenizerFast.from_pretrained(teacher_dir)
    full = encode_prompt(tok, long_query)
    assert len(full) > context
    served: list[list[int]] = []
    real = generate_answer.generate_batch

    def recording(model, tok, prompts, max_new_tokens):
        served.extend(prompts)
        return real(model, tok, prompts, max_new_tokens)

    monkeypatch.setattr(generate_answer, "generate_batch", recording)
    generate_answer.main(flags(teacher_dir, path))
    limit = context - MAX_NEW
    assert f"1 of 3 prompts are longer than {limit} tokens" in capsys.readouterr().out
    cut = max(served, key=len)
    assert cut == full[:1] + full[len(full) - limit + 1 :]  # the template's start (BOS) and its end
    assert sorted(map(len, served))[:2] == sorted(len(encode_prompt(tok, q)) for q in QUERIES[:2])


def test_missing_output_folder_is_created_before_the_model_loads(
    teacher_dir, conversations, tmp_path, monkeypatch
):
    out = tmp_path / "new" / "folder" / "answers.json"
    real = generate_answer.load_teacher
    folder_there: list[bool] = []

    def loading(*args):
        folder_there.append(out.parent.is_dir())
        return real(*args)

    monkeypatch.setattr(generate_answer, "load_teacher", loading)
    assert generate_answer.main([*flags(teacher_dir, conversations), "--output", str(out)]) == out
    assert folder_there == [True] and len(load_conversations(out)) == len(QUERIES)


def test_output_equal_to_the_input_is_refused(teacher_dir, conversations):
    before = conversations.read_bytes()
    alias = conversations.parent / ".." / conversations.parent.name / conversations.name
    with pytest.raises(ValueError, match="--output .* is the input file"):
        generate_answer.main([*flags(teacher_dir, conversations), "--output", str(alias)])
    assert conversations.read_bytes() == before


def test_encoder_decoder_teacher_reads_the_bare_query(tmp_path, conversations):
    """A T5 teacher: batched (left-padded encoder inputs) answers equal one-by-one generate."""
    from transformers import T5ForConditionalGeneration

    tok = tiny_tokenizer(VOCAB, template="$A </s>", bos=None, pad="<unk>")
    torch.manual_seed(1)
    config = tiny_t5_config(len(VOCAB))
    model = T5ForConditionalGeneration(config).eval()
    with torch.no_grad():  # T5's own init makes a tiny model repeat one token whatever the input
        for param in model.parameters():
            param.normal_(0, 0.5)
    model.save_pretrained(tmp_path / "t5")
    tok.save_pretrained(tmp_path / "t5")

    out = generate_answer.main(flags(tmp_path / "t5", conversations))
    got = [r["conversation"][-1]["content"] for r in load_conversations(out)]
    expected = []
    for query in QUERIES:
        ids = torch.tensor([tok(query).input_ids])  # no chat template: the query and EOS
        new = model.generate(ids, max_new_tokens=MAX_NEW, do_sample=False)[0, 1:].tolist()
        expected.append(
            tok.decode(new[: new.index(2)] if 2 in new else new, skip_special_tokens=True).strip()
        )
    assert got == expected and len(set(got)) > 2  # answers depend on the query


def test_missing_model_path_is_named(conversations, tmp_path):
    missing = tmp_path / "models" / "no_such_teacher"
    with pytest.raises(FileNotFoundError, match=f"model path {missing}: no such folder"):
        generate_answer.main(flags(missing, conversations))


def test_a_folder_input_is_answered_like_its_file(teacher_dir, conversations, tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    shutil.copy(conversations, folder / "train.json")
    argv = flags(teacher_dir, folder)
    with pytest.raises(ValueError, match="is not a file: name the answered file with --output"):
        generate_answer.main(argv)
    from_folder = generate_answer.main([*argv, "--output", str(tmp_path / "from_folder.json")])
    assert load_conversations(from_folder) == load_conversations(
        generate_answer.main(flags(teacher_dir, conversations))
    )
