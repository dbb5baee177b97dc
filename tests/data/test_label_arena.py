"""data/label_arena.py: offline language/topic labels, the hub classifier path, and the output files."""

import json
from collections import Counter
from pathlib import Path

import label_arena
import pytest

from osd.conversations import load_conversations


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("What is the difference between OpenCL and CUDA?", "English"),
        ("¿Cuál es la capital de España y por qué es importante para la historia del país?", "Spanish"),
        ("Quelle est la différence entre un chat et un chien pour les enfants ?", "French"),
        ("Wie ist das Wetter heute in Berlin und was ist nicht gut?", "German"),
        ("请用三句话介绍一下北京。", "Chinese"),
        ("東京の天気はどうですか？", "Japanese"),
        ("서울의 날씨는 어때요?", "Korean"),
        ("Привет, как у тебя дела сегодня?", "Russian"),
        ("12345 !!!", "unknown"),
    ],
)
def test_detect_language(text, language):
    assert label_arena.detect_language(text) == language


def test_keyword_topics():
    assert (
        label_arena.keyword_topic("Write a Python function that reverses a string")
        == "Computers and Technology"
    )
    assert (
        label_arena.keyword_topic("How should a startup price its product for business customers?")
        == "Business/Corporate"
    )
    assert label_arena.keyword_topic("Let's play a game of chess") == "Games"
    assert label_arena.keyword_topic("zzz qqq") == "unknown"


def arena_file(path: Path) -> Path:
    """Records per language and topic; the non-English ones come first (the reference's filter
    emptied every file after the first language)."""
    specs = [("Spanish", "¿Qué es la inflación y por qué sube?")] * 3 + [("Chinese", "介绍一下北京。")] * 2
    specs += [("English", "Write a Python function to sort a list")] * 4
    specs += [("English", "Let's play a game of chess, you are the player with white")] * 3
    specs += [("English", "How can my startup business increase sales revenue?")] * 2
    recs = [
        {
            "id": f"arena_train_{i}",
            "dataset": "arena",
            "language": lang,
            "conversation": [{"role": "user", "content": f"{text} ({i})"}],
        }
        for i, (lang, text) in enumerate(specs)
    ]
    recs.append(
        {
            "id": "no_language",
            "dataset": "arena",
            "conversation": [{"role": "user", "content": "What is the time?"}],
        }
    )
    path.write_text(json.dumps(recs))
    return path


def test_language_files_are_each_filtered_from_all_records(tmp_path):
    src = arena_file(tmp_path / "arena.json")
    label_arena.main(["--input", str(src), "--mode", "language", "--output_dir", str(tmp_path / "out")])
    sizes = {p.stem: len(load_conversations(p)) for p in (tmp_path / "out").glob("*.json")}
    assert sizes == {"English": 10, "Spanish": 3, "Chinese": 2}  # "no_language" detected as English
    assert all(r["language"] == "English" for r in load_conversations(tmp_path / "out" / "English.json"))


def test_mix_takes_first_k_per_topic_shuffled(tmp_path):
    src = arena_file(tmp_path / "arena.json")
    out = tmp_path / "out"
    argv = [
        "--input",
        str(src),
        "--mode",
        "mix",
        "--classifier",
        "local",
        "--output_dir",
        str(out),
        "--topics",
        "Computers and Technology",
        "Games",
        "Business/Corporate",
        "--per_topic",
        "2",
    ]
    label_arena.main(argv)
    mixed = load_conversations(out / "mix_topics.json")
    assert Counter(r["topic"] for r in mixed) == {
        "Computers and Technology": 2,
        "Games": 2,
        "Business/Corporate": 2,
    }
    assert {r["id"] for r in mixed if r["topic"] == "Games"} == {
        "arena_train_9",
        "arena_train_10",
    }  # the first two
    grouped = sorted(
        mixed, key=lambda r: ["Computers and Technology", "Games", "Business/Corporate"].index(r["topic"])
    )
    assert mixed != grouped  # shuffled
    label_arena.main(argv)
    assert load_conversations(out / "mix_topics.json") == mixed  # seeded


def test_topic_mode_uses_hub_pipeline_on_english_first_turns(tmp_path, monkeypatch):
    seen = {}

    def fake_pipeline(task, model, truncation):
        seen["task"], seen["model"] = task, model

        def classify(texts, batch_size):
            seen["texts"] = list(texts)
            return [{"label": "Education" if "sort" in t else "Forums", "score": 0.9} for t in texts]

        return classify

    monkeypatch.setattr(label_arena, "pipeline", fake_pipeline)
    src = arena_file(tmp_path / "arena.json")
    label_arena.main(
        ["--input", str(src), "--mode", "topic", "--classifier", "hub", "--output_dir", str(tmp_path / "out")]
    )
    assert seen["task"] == "text-classification" and seen["model"] == label_arena.HUB_MODEL
    assert len(seen["texts"]) == 10 and not any("北京" in t or "inflación" in t for t in seen["texts"])
    assert len(load_conversations(tmp_path / "out" / "Education.json")) == 4
    assert len(load_conversations(tmp_path / "out" / "Forums.json")) == 6


def test_auto_falls_back_to_local_rules_when_the_hub_model_is_missing(tmp_path, monkeypatch, capsys):
    def offline(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co'")

    monkeypatch.setattr(label_arena, "pipeline", offline)
    classify = label_arena.topic_classifier("auto", label_arena.HUB_MODEL, 8)
    assert "using the offline keyword rules" in capsys.readouterr().out
    assert classify(["Let's play a game"]) == ["Games"]
    with pytest.raises(OSError):
        label_arena.topic_classifier("hub", label_arena.HUB_MODEL, 8)
