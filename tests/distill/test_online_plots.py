"""osd.plots: the moving average, dataset bands and a PNG from a metrics.jsonl."""

from __future__ import annotations

import json
import random

import pytest

from osd.plots import alpha_series, dataset_bands, main, moving_average


def test_moving_average_matches_a_direct_window_mean():
    rng = random.Random(0)
    xs = sorted(rng.sample(range(1, 400), 120))  # uneven spacing, as with skipped log entries
    ys = [rng.random() for _ in xs]
    _, got = moving_average(xs, ys, window=25)
    for x, g in zip(xs, got, strict=True):
        inside = [y for x2, y in zip(xs, ys, strict=True) if x - 25 < x2 <= x]
        assert g == pytest.approx(sum(inside) / len(inside))


def test_dataset_bands_are_the_runs_of_a_stream():
    assert dataset_bands(["a", "a", "b", "b", "b", "a"]) == [(0, 2, "a"), (2, 5, "b"), (5, 6, "a")]


def test_cli_writes_a_png_from_online_entries_only(tmp_path):
    lines = [{"step": i, "queries": i, "alpha": i / 10, "alpha_window": 0.0} for i in range(1, 11)]
    lines.insert(3, {"step": 3, "loss": 0.5, "learning_rate": 1e-4})  # a Trainer entry: not a point
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    assert alpha_series(lines) == ([float(i) for i in range(1, 11)], [i / 10 for i in range(1, 11)])
    stream = [{"conversation": [{"role": "user", "content": "q"}], "dataset": d} for d in "aaaaabbbbb"]
    (tmp_path / "stream.json").write_text(json.dumps(stream))
    out = tmp_path / "alpha.png"
    main(
        [
            str(tmp_path),
            "--out",
            str(out),
            "--stream",
            str(tmp_path / "stream.json"),
            "--reference",
            "Standard=0.4",
        ]
    )
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
