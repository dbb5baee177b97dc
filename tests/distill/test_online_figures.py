"""The online figure drivers (benchmarks/online_shift.py) on the tiny pair: static drafts on stream
prefixes (Fig. 3/4), alpha per topic over a mixed stream (Fig. 5)."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks import online_common, online_shift
from osd.conversations import load_conversations
from osd.paths import TINY_DRAFT_PATH, TINY_TEACHER_PATH


@pytest.fixture(autouse=True)
def tiny_pair(monkeypatch):
    """The drivers serve and distil with the tiny pair instead of the demo pair."""
    monkeypatch.setattr(online_common, "TARGET_PATH", TINY_TEACHER_PATH)
    monkeypatch.setattr(online_common, "DRAFT_PATH", TINY_DRAFT_PATH)


@pytest.mark.slow
def test_static_drafts_are_distilled_on_the_stream_prefix_and_reported_per_segment(tmp_path):
    out = tmp_path / "shift"
    fractions = [0.3, 0.5, 1.0]
    results = online_shift.main(["--domains", "sql", "math", "--per_domain", "4", "--window", "2",
                                 "--static_fractions", *map(str, fractions), "--offline_steps", "1",
                                 "--out", str(out)])  # fmt: skip
    stream = load_conversations(out / "online" / "stream.json")
    assert [r["dataset"] for r in stream] == ["sql"] * 4 + ["math"] * 4
    names = [f"offline, first {f:.0%}" for f in fractions]
    for i, (name, f) in enumerate(zip(names, fractions, strict=True)):
        trained_on = load_conversations(out / f"offline{i}_draft" / "train.json")
        assert trained_on == stream[: int(f * len(stream) + 0.5)]  # 2, 4 and 8 of the 8 queries
        assert results["static_records"][name] == len(trained_on)
        # each static draft served the whole stream (that draft, not the demo one), never updated
        served_by = json.loads((out / f"offline{i}" / "run.json").read_text())["student_model_path"]
        assert served_by == str((out / f"offline{i}_draft").resolve())
        served = load_conversations(out / f"offline{i}" / "stream.json")
        assert served == stream
        entries = online_common.read_entries(out / f"offline{i}")
        assert len(entries) == len(stream) and entries[-1]["online_updates"] == 0
    assert online_common.read_entries(out / "online")[-1]["online_updates"] == len(stream)
    rows = results["rows"]
    assert [r["segment"] for r in rows] == ["sql (1-4)", "math (5-8)"]
    for row in rows:
        for column in ["online", "Standard", "online first 2", "online last 2", *names]:
            assert 0.0 <= row[column] <= 1.0
    assert (out / "alpha.png").stat().st_size > 0
    saved = json.loads((out / "results.json").read_text())
    assert saved["command"].startswith("python -m benchmarks.")
    assert "offline, first 30%" in (out / "table.md").read_text()


@pytest.mark.slow
def test_alpha_per_topic_matches_the_trainers_group_log_and_adds_up_to_the_overall_alpha(tmp_path):
    out = tmp_path / "topics"
    topics = ["school", "savings", "loan"]
    results = online_shift.main(["--kind", "mix", "--domains", "sql", "math", "finance", "--topics", *topics,
                                 "--queries", "12", "--window", "4", "--out", str(out)])  # fmt: skip
    stream = load_conversations(out / "online" / "stream.json")
    assert {r["topic"] for r in stream} <= set(topics)
    for run in ("online", "standard"):
        entries = online_common.label_queries(online_common.read_entries(out / run), stream)
        for entry, record in zip(entries, stream, strict=True):
            # the trainer's own per-group log of this query (whatever its key format: it ends with the value)
            logged = [entry[k] for k in entry if k.startswith("alpha") and k.endswith(record["topic"])]
            assert logged == [pytest.approx(entry["alpha"])] and entry["groups"]["topic"] == record["topic"]
            others = [k for k in entry for t in topics if t != record["topic"] and k.endswith(t)]
            assert not others
        # per-topic alpha, weighted by each topic's proposals, adds up to the stream's alpha
        weighted = proposed = 0
        for topic in topics:
            mine = online_common.of_group(entries, topic)
            weight = sum(e["proposed"] for e in mine)
            if weight:
                weighted += online_common.alpha_over(entries, 0, len(stream), topic) * weight
            proposed += weight
        assert proposed == sum(e["proposed"] for e in entries) > 0
        assert weighted / proposed == pytest.approx(online_common.alpha_over(entries, 0, len(stream)))
    groups = {row["group"]: row for row in results["groups"]}
    assert list(groups) == ["all", *topics]
    assert sum(row["queries"] for name, row in groups.items() if name != "all") == len(stream) == 12
    for row in groups.values():
        diff = row["online 1-12"] - row["Standard 1-12"]
        assert math.isnan(diff) or row["online - Standard"] == pytest.approx(diff)
    assert (out / "alpha_groups.png").stat().st_size > 0 and (out / "alpha.png").stat().st_size > 0
    assert "alpha per topic" in (out / "table.md").read_text()


def test_unknown_topic_and_bad_fraction_are_errors_naming_them():
    with pytest.raises(
        ValueError, match=r"no record of \['sql'\] has topic \['nope'\]; topics there: .*school"
    ):
        online_common.topic_sources(["sql"], ["school", "nope"])
    with pytest.raises(ValueError, match="static draft fraction 1.5"):
        online_common.prefix_samples([{}] * 4, [1.5])


def test_label_queries_refuses_entries_that_are_not_one_per_query():
    stream = [{"conversation": [], "topic": "a"}, {"conversation": [], "topic": "b"}]
    with pytest.raises(ValueError, match="one log entry per query for 2 queries"):
        online_common.label_queries([{"alpha": 0.5, "proposed": 4}], stream)
