"""osd.plots: the moving average, dataset bands and a PNG from a metrics.jsonl."""

from __future__ import annotations

import json
import random

import pytest

from osd.plots import alpha_series, dataset_bands, group_series_key, main, moving_average, read_log


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
    lines = [{"step": i, "queries_served": i, "alpha": i / 10, "alpha_window": 0.0} for i in range(1, 11)]
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


def write_log(folder, entries: list[dict]):
    (folder / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    return folder


def test_groups_by_field_and_value_or_value_alone(tmp_path):
    entries = [{"queries_served": i, "alpha": 0.5, "alpha_window": 0.5, "alpha/dataset/sql": i / 10,
                "alpha/topic/sql": 1.0, "alpha/language/en": 0.3} for i in (1, 2)]  # fmt: skip
    assert group_series_key(entries, "dataset/sql") == "alpha/dataset/sql"
    assert group_series_key(entries, "en") == "alpha/language/en"
    with pytest.raises(SystemExit, match="more than one.*alpha/dataset/sql"):
        group_series_key(entries, "sql")  # a dataset and a topic of that name
    with pytest.raises(SystemExit, match="no matching key"):
        group_series_key(entries, "dataset/math")
    out = tmp_path / "alpha.png"
    main([str(write_log(tmp_path, entries)), "--out", str(out), "--groups", "dataset/sql", "en"])
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_logs_from_before_the_hierarchical_names_still_plot(tmp_path):
    """Older metrics.jsonl: the counter was `queries`, per-group alpha `alpha_{value}`."""
    old = [{"step": i, "queries": i, "alpha": i / 10, "alpha_window": 0.1, "alpha_sql": 0.2} for i in (1, 2)]
    entries = read_log(write_log(tmp_path, old + [{"step": 3, "queries": 7, "loss": 1.0}]))
    assert alpha_series(entries) == ([1.0, 2.0], [0.1, 0.2])
    assert alpha_series(entries, group_series_key(entries, "sql")) == ([1.0, 2.0], [0.2, 0.2])
    assert entries[-1] == {"step": 3, "queries": 7, "loss": 1.0}  # not an online entry: left as it was


@pytest.mark.parametrize("window", ["0", "-1", "nan"])
def test_a_window_of_no_queries_is_a_usage_error(tmp_path, window, capsys):
    """Issue 49: --window 0 or -1 divided by zero in the moving average (a traceback)."""
    write_log(tmp_path, [{"step": 1, "queries_served": 1, "alpha": 0.5}])
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path), "--out", str(tmp_path / "alpha.png"), "--window", window])
    assert exit_info.value.code == 2
    assert f"argument --window: {window}; expected a number above 0" in capsys.readouterr().err
    assert not (tmp_path / "alpha.png").exists()


def test_the_png_is_never_written_over_an_input(tmp_path):
    write_log(tmp_path, [{"step": 1, "queries_served": 1, "alpha": 0.5}])
    before = (tmp_path / "metrics.jsonl").read_bytes()
    with pytest.raises(ValueError, match="--out .* is the input file"):
        main([str(tmp_path), "--out", str(tmp_path / "metrics.jsonl")])
    assert (tmp_path / "metrics.jsonl").read_bytes() == before


def test_a_stream_shorter_than_the_run_it_shades_is_refused_naming_both(tmp_path):
    """Issue 49, rule 2: a log plotted against another stream would shade the wrong queries."""
    write_log(tmp_path, [{"queries_served": i, "alpha": 0.5, "alpha_window": 0.5} for i in range(1, 9)])
    stream = [{"conversation": [{"role": "user", "content": "q"}], "dataset": "a"}] * 5
    (tmp_path / "stream.json").write_text(json.dumps(stream))
    with pytest.raises(
        ValueError,
        match=rf"--stream .*stream\.json holds 5 queries, but the metrics {tmp_path} logged 8 served",
    ):
        main([str(tmp_path), "--out", str(tmp_path / "alpha.png"), "--stream", str(tmp_path / "stream.json")])
    assert not (tmp_path / "alpha.png").exists()


def test_a_stream_of_other_datasets_is_refused_naming_both(tmp_path):
    """Issue 49, rule 2: a stream as long as the run but of other datasets shaded bands the run never served."""
    write_log(tmp_path, [{"queries_served": i, "alpha": 0.5, "alpha/dataset/sql": 0.5} for i in (1, 2)])
    (tmp_path / "stream.json").write_text(json.dumps([{"conversation": [{"role": "user", "content": "q"}],
                                                       "dataset": "math"}] * 2))  # fmt: skip
    with pytest.raises(ValueError, match=rf"the metrics {tmp_path} log alpha for datasets \['sql'\] that --stream "
                       rf"{tmp_path}/stream.json does not hold \(it holds \['math'\]\)"):  # fmt: skip
        main([str(tmp_path), "--out", str(tmp_path / "alpha.png"), "--stream", str(tmp_path / "stream.json")])


def test_a_log_without_online_alpha_is_refused(tmp_path):
    """Issue 49 probe: an empty (or offline) metrics.jsonl gave an empty plot with exit status 0."""
    write_log(tmp_path, [{"step": 1, "loss": 0.5}])
    with pytest.raises(ValueError, match=f"the metrics {tmp_path} hold no online alpha"):
        main([str(tmp_path), "--out", str(tmp_path / "alpha.png")])
    assert not (tmp_path / "alpha.png").exists()


def test_a_saved_png_is_a_palette_image_of_the_figure_as_matplotlib_draws_it(tmp_path):
    import io

    import matplotlib.pyplot as plt
    import numpy as np
    from PIL import Image

    from osd.plots import DPI, PNG_COLOURS, save_figure

    def figure():
        fig, ax = plt.subplots(figsize=(4, 3))
        for i in range(6):  # six antialiased colours and a legend, as the project's plots draw
            ax.plot(np.linspace(0, 1, 50) ** (i + 1), label=f"line {i}")
        ax.legend()
        return fig

    drawn = io.BytesIO()
    figure().savefig(drawn, format="png", dpi=DPI)
    plt.close("all")
    path = save_figure(figure(), tmp_path / "figure.png")
    assert plt.get_fignums() == []  # closed once written
    saved, reference = Image.open(path), Image.open(drawn)
    assert saved.mode == "P" and len(saved.getcolors(maxcolors=1024)) <= PNG_COLOURS
    assert saved.size == reference.size == (4 * DPI, 3 * DPI)
    difference = np.abs(
        np.asarray(saved.convert("RGB"), dtype=float) - np.asarray(reference.convert("RGB"), dtype=float)
    )
    assert difference.mean() < 0.3  # of 255: the palette's rounding (0.09 here; one line left out: 0.95)
    assert path.stat().st_size < len(drawn.getvalue())
    pdf = save_figure(figure(), tmp_path / "figure.pdf")
    assert pdf.read_bytes().startswith(b"%PDF")
