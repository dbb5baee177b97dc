"""benchmarks.demo_summaries: a main job's summaries tabulated, their speedups computed by hand here."""

from __future__ import annotations

import json

import pytest

from benchmarks import demo_summaries

HELD = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def summary(cpu: str, held: bool, sd_s: float, online_s: float, wall_s: float) -> dict:
    """Two domains of 100 tokens each: the target alone takes 10 s a domain (10 tok/s), Standard SD `sd_s`,
    online SD `online_s`; Eq. 2 predicts 1.25x for Standard and 2.5x for online."""
    domain = {"standard": {"alpha": 0.4, "sd_tokens": 100, "sd_s": sd_s, "target_tokens": 100, "target_s": 10.0},
              "online": {"alpha": 0.6, "tokens": 100, "s": online_s}}  # fmt: skip
    return {
        "command": "python -m osd.demo.online_demo", "machine": {"cpu": cpu, "isa_limits": HELD if held else {}},
        "costs": {"prefill": 3.5, "prefill_eq2_standard": 1.25, "prefill_eq2_online": 2.5},
        "domains": [{"domain": d, **domain} for d in ("sql", "math")], "serving": {"layout": "bf16_rows"},
        "wall_s": wall_s, "background_update_share": 0.4,
    }  # fmt: skip


def test_runs_and_their_medians_by_machine(tmp_path, capsys):
    runs = {  # name: (cpu, held, Standard SD s, online SD s, job s)
        "summary_a_1.json": ("A", True, 8.0, 5.0, 200.0),  # Standard 1.25x, online 2x
        "summary_a_2.json": ("A", True, 10.0, 4.0, 219.6),  # 1x, 2.5x
        "summary_a_3.json": ("A", True, 5.0, 8.0, 190.0),  # 2x, 1.25x
        "summary_b_1.json": ("A", False, 4.0, 2.0, 100.0),  # 2.5x, 5x
    }
    for name, run in runs.items():
        (tmp_path / name).write_text(json.dumps(summary(*run)))
    (tmp_path / "results.json").write_text("{}")  # beside them, not a summary: not read
    out = tmp_path / "tables" / "runs.json"
    result = demo_summaries.main([str(tmp_path), "--out", str(out)])
    first = result["runs"][0]
    assert first["file"] == "summary_a_1.json" and first["machine"] == "A, held to AVX2"
    assert first["target_alone_tokens_per_s"] == pytest.approx(10.0)
    assert (first["standard"], first["online"]) == pytest.approx((1.25, 2.0))
    assert first["online_tokens_per_s"] == pytest.approx(20.0)
    assert (first["standard_over_eq2"], first["online_over_eq2"]) == pytest.approx((1.0, 0.8))
    held, plain = result["groups"]
    assert (held["machine"], held["runs"], plain["machine"], plain["runs"]) == ("A, held to AVX2", 3, "A", 1)
    assert held["standard"] == pytest.approx({"median": 1.25, "min": 1.0, "max": 2.0})
    assert held["online"] == pytest.approx({"median": 2.0, "min": 1.25, "max": 2.5})
    printed = capsys.readouterr().out
    assert (
        "| A, held to AVX2 | 3 | 10.0-10.0 | 1.25x (1.00-2.00x) | 2.00x (1.25-2.50x) | 3:10-3:40 |" in printed
    )
    assert (
        "| `summary_a_2.json` | 10.0 | 1.00x | 2.50x | 25.0 | 0.80, 1.00 | 3.50 (bf16_rows) | 0.40 | 3:40 |"
        in printed
    )
    written = json.loads(out.read_text())
    assert written["command"].startswith("python -m benchmarks.demo_summaries ")
    assert [g["runs"] for g in written["groups"]] == [3, 1]


def test_an_even_count_of_runs_gives_the_middle_two_s_mean_with_a_third_decimal():
    assert demo_summaries.speedup({"median": 1.295, "min": 1.29, "max": 1.31}, 4) == "1.295x (1.29-1.31x)"
    assert demo_summaries.speedup({"median": 1.3, "min": 1.29, "max": 1.31}, 3) == "1.30x (1.29-1.31x)"
    assert demo_summaries.minutes(59.6) == "1:00"


def test_files_that_are_not_summaries_are_named(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="empty: a folder without summary"):
        demo_summaries.main([str(tmp_path / "empty")])
    bad = tmp_path / "summary.json"
    bad.write_text('{"command": "x"}')
    with pytest.raises(ValueError, match="summary.json: not a main job's summary.json"):
        demo_summaries.main([str(bad)])
    bad.write_text("{")
    with pytest.raises(ValueError, match="summary.json: not JSON"):
        demo_summaries.main([str(bad)])


def test_by_name_keeps_each_commits_runs_apart(tmp_path):
    for name, sd_s in (
        ("summary_m_aaa_1.json", 8.0),
        ("summary_m_aaa_2.json", 10.0),
        ("summary_m_bbb_1.json", 5.0),
    ):
        (tmp_path / name).write_text(json.dumps(summary("A", False, sd_s, 5.0, 100.0)))
    assert [g["runs"] for g in demo_summaries.main([str(tmp_path)])["groups"]] == [3]
    groups = demo_summaries.main([str(tmp_path), "--by_name"])["groups"]
    assert [(g["machine"], g["runs"]) for g in groups] == [("A (summary_m_aaa)", 2), ("A (summary_m_bbb)", 1)]
    assert groups[0]["standard"]["median"] == pytest.approx((1.25 + 1.0) / 2)
