"""The online figure drivers (benchmarks/online_shift.py, online_single.py) on the tiny pair: static drafts
on stream prefixes (Fig. 3/4), alpha per topic over a mixed stream (Fig. 5), the Fig. 2 driver's recipe
flags and its ablation record."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from benchmarks import online_shift, online_single
from osd import streams
from osd.conversations import load_conversations
from osd.distill import demo_runs
from osd.paths import TINY_DRAFT_PATH, TINY_TEACHER_PATH


@pytest.fixture(autouse=True)
def tiny_pair(monkeypatch):
    """The drivers serve and distil with the tiny pair instead of the demo pair."""
    monkeypatch.setattr(demo_runs, "TARGET_PATH", TINY_TEACHER_PATH)
    monkeypatch.setattr(demo_runs, "DRAFT_PATH", TINY_DRAFT_PATH)


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
        entries = demo_runs.read_entries(out / f"offline{i}")
        assert len(entries) == len(stream) and entries[-1]["online_updates"] == 0
    assert demo_runs.read_entries(out / "online")[-1]["online_updates"] == len(stream)
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
        entries = demo_runs.label_queries(demo_runs.read_entries(out / run), stream)
        for entry, record in zip(entries, stream, strict=True):
            # the trainer's own per-group log of this query (whatever its key format: it ends with the value)
            logged = [entry[k] for k in entry if k.startswith("alpha") and k.endswith(record["topic"])]
            assert logged == [pytest.approx(entry["alpha"])] and entry["groups"]["topic"] == record["topic"]
            others = [k for k in entry for t in topics if t != record["topic"] and k.endswith(t)]
            assert not others
        # per-topic alpha, weighted by each topic's proposals, adds up to the stream's alpha
        weighted = proposed = 0
        for topic in topics:
            mine = demo_runs.of_group(entries, topic)
            weight = sum(e["proposed"] for e in mine)
            if weight:
                weighted += demo_runs.alpha_over(entries, 0, len(stream), topic) * weight
            proposed += weight
        assert proposed == sum(e["proposed"] for e in entries) > 0
        assert weighted / proposed == pytest.approx(demo_runs.alpha_over(entries, 0, len(stream)))
    groups = {row["group"]: row for row in results["groups"]}
    assert list(groups) == ["all", *topics]
    assert sum(row["queries"] for name, row in groups.items() if name != "all") == len(stream) == 12
    for row in groups.values():
        online, standard = row["online 1-12"], row["Standard 1-12"]
        if online is None or standard is None:  # a group where nothing was proposed: no figure, not NaN
            assert row["online - Standard"] is None
        else:
            assert row["online - Standard"] == pytest.approx(online - standard)
    assert (out / "alpha_groups.png").stat().st_size > 0 and (out / "alpha.png").stat().st_size > 0
    assert "alpha per topic" in (out / "table.md").read_text()


def test_unknown_topic_and_bad_fraction_are_errors_naming_them():
    with pytest.raises(
        ValueError, match=r"no record of \['sql'\] has topic \['nope'\]; topics there: .*school"
    ):
        streams.topic_sources(["sql"], ["school", "nope"])
    with pytest.raises(ValueError, match="static draft fraction 1.5"):
        demo_runs.prefix_samples([{}] * 4, [1.5])


def test_label_queries_refuses_entries_that_are_not_one_per_query():
    stream = [{"conversation": [], "topic": "a"}, {"conversation": [], "topic": "b"}]
    with pytest.raises(ValueError, match="one log entry per query for 2 queries"):
        demo_runs.label_queries([{"alpha": 0.5, "proposed": 4}], stream)


def test_online_single_takes_the_short_recipe_flags_and_records_the_methods_ablation_part(tmp_path):
    """The recipe's old flag names (aliases of the online flags) reach the run, and --results writes the
    ablations' methods_training part (what benchmarks/ablation_methods.py did by calling this driver's main)."""
    argv = ["--domain", "sql", "--queries", "4", "--update_interval", "2", "--steps_per_update", "2",
            "--loss_positions", "all", "--offline_steps", "1", "--sample_fraction", "0", "--window", "2",
            "--out", str(tmp_path / "single"), "--results", str(tmp_path / "ablations")]  # fmt: skip
    results = online_single.main(argv)
    assert (
        results["args"]["online_steps_per_update"] == 2 and results["args"]["online_loss_positions"] == "all"
    )
    assert results["cost"]["updates"] == 2  # one update per 2 of the 4 queries
    assert [r["run"] for r in results["quarters"]] == ["online", "Standard", "offline-distilled"]
    part = json.loads((tmp_path / "ablations" / "parts" / "methods_training.json").read_text())
    assert part["command"] == "python -m benchmarks.online_single " + " ".join(argv)
    assert part["quarters"] == json.loads(json.dumps(results["quarters"]))  # NaN-free here, so equal


def test_runs_refuse_an_eval_interval_that_is_not_one_log_entry_per_query(tmp_path):
    with pytest.raises(ValueError, match="--online_eval_interval 5: these runs read one log entry per query"):
        demo_runs.run_online(tmp_path, [], replace(demo_runs.BENCHMARK_PRESET, online_eval_interval=5))
