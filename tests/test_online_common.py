"""osd.distill.demo_runs: the drivers' reader of online log entries, per group, new and older logs."""

from __future__ import annotations

import json

import pytest

from osd.distill.demo_runs import alpha_over, label_queries, read_entries


def test_alpha_over_a_range_and_a_group_is_token_weighted(tmp_path):
    entries = [
        {"step": 1, "queries_served": 1, "alpha": 0.5, "alpha_window": 0.5, "proposed": 4, "alpha/dataset/sql": 0.5},
        {"step": 1, "loss": 1.0},  # Trainer's own entry: not a query
        {"step": 2, "queries_served": 2, "alpha": 0.2, "alpha_window": 0.3, "proposed": 1, "alpha/dataset/math": 0.2},
        {"step": 3, "queries": 3, "alpha": 0.9, "alpha_window": 0.4, "proposed": 5, "alpha_sql": 0.9},  # an older line
    ]  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    got = read_entries(tmp_path)
    assert [e["queries_served"] for e in got] == [1, 2, 3]
    stream = [{"dataset": "sql"}, {"dataset": "math"}, {"dataset": "sql"}]
    labelled = label_queries(got, stream)
    assert alpha_over(labelled, 0, 2) == pytest.approx((0.5 * 4 + 0.2) / 5)
    assert alpha_over(labelled, 0, 3, "sql") == pytest.approx((0.5 * 4 + 0.9 * 5) / 9)
    assert alpha_over(labelled, 1, 3) == pytest.approx((0.2 + 0.9 * 5) / 6)
    with pytest.raises(ValueError, match="one log entry per query"):
        label_queries(got, stream[:2])
