"""osd.analysis.copying: copyable tokens by definition, the draft's teacher-forced argmax against
one forward per prefix, and the per-group counts against a direct count."""

from __future__ import annotations

import pytest
import torch

from osd.analysis.copying import copy_counts, draft_predictions, followers, main
from osd.analysis.record import record_conversations, record_prompts
from osd.analysis.recording import RecordingError
from osd.paths import DRAFT_PATH, TINY_DRAFT_PATH, TINY_TEACHER_PATH, workload_path
from tests.tiny_models import EOS, RANDOM_TOKENIZER, draft_from_target, tiny_model


def test_followers_are_the_tokens_after_earlier_occurrences_of_the_previous_one():
    ids = [5, 6, 7, 5, 9, 5, 6]
    assert followers(ids, 6) == [6, 9]  # before position 6 the previous token 5 was followed by 6, then 9
    assert followers(ids, 3) == []  # 7 occurs nowhere before
    assert followers(ids, 4) == [6]  # the last 5 itself (position 3) has no follower yet


@pytest.fixture(scope="module")
def recording_and_draft():
    target = tiny_model("llama", layers=2, seed=3)
    gen = torch.Generator().manual_seed(0)
    # prompts that repeat a few ids, so some answer tokens are copyable
    prompts = [
        (f"{g}_{i}", torch.randint(3, 9, (8,), generator=gen).tolist()) for g in ("a", "b") for i in range(2)
    ]
    recording = record_prompts(
        target, prompts, {"tokenizer": RANDOM_TOKENIZER}, max_new_tokens=12, eos_token_id=EOS
    )
    return recording, draft_from_target(target, noise=0.6)


def test_predictions_are_the_argmax_after_each_prefix(recording_and_draft):
    recording, draft = recording_and_draft
    record = recording.prompts[0]
    predicted = draft_predictions(draft, record)
    assert len(predicted) == len(record.output_ids)
    for i in range(len(record.output_ids)):
        with torch.no_grad():
            prefix = torch.tensor([record.prompt_ids + record.output_ids[:i]])
            assert predicted[i] == int(draft(prefix).logits[0, -1].argmax())


def test_counts_per_group_equal_a_direct_count(recording_and_draft):
    recording, draft = recording_and_draft
    table = copy_counts(draft, recording.prompts)
    assert set(table) == {"a", "b"}
    for group, row in table.items():
        records = [r for r in recording.prompts if r.id.startswith(group)]
        copyable = matched = 0
        for r in records:
            ids = r.prompt_ids + r.output_ids
            for i, (token, p) in enumerate(zip(r.output_ids, draft_predictions(draft, r), strict=True)):
                copyable += token in followers(ids, len(r.prompt_ids) + i)
                matched += p == token
        n = sum(len(r.output_ids) for r in records)
        assert row["tokens"] == n and row["copyable_share"] == pytest.approx(copyable / n)
        assert row["match"] == pytest.approx(matched / n)
    assert 0 < sum(row["copyable_share"] for row in table.values())  # some tokens were copyable: a real test


def test_the_cli_counts_a_draft_of_the_recordings_tokenizer_and_refuses_another(tmp_path):
    stem = tmp_path / "rec"
    record_conversations(TINY_TEACHER_PATH, workload_path("sql", "eval"), limit=2, max_new_tokens=8).save(
        stem
    )
    result = main(
        ["--recording", str(stem), "--draft", str(TINY_DRAFT_PATH), "--out", str(tmp_path / "c.json")]
    )
    assert result["groups"]["sql"]["tokens"] > 0
    with pytest.raises(
        RecordingError, match="tokenizer"
    ):  # SmolLM2's draft against the tiny pair's recording
        main(["--recording", str(stem), "--draft", str(DRAFT_PATH), "--out", str(tmp_path / "other.json")])
