r"""Plots of alpha over the query stream from online runs' `metrics.jsonl` (the paper's Fig. 2-4, 6).

    python -m osd.plots outputs/online_demo/metrics.jsonl --out alpha.png \
        --reference Standard=0.41 --reference offline=0.72 --stream data/local/shift_stream.json

Each online log entry carries `queries_served` and `alpha` (token-weighted over the queries since the
previous entry; names: osd.metric_keys); the curve is its moving average over --window queries.
Optional: horizontal reference lines (Standard SD, an offline-distilled draft), shaded bands for
the datasets of the stream (from the records' `dataset` field, in stream order), per-group curves
(--groups dataset/sql topic/shop: the `alpha/{field}/{value}` keys). Logs written before that scheme
(`queries`, `alpha_{value}`) are read too: give such groups by value alone (--groups sql).
"""

from __future__ import annotations

import argparse
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.backend_bases import FigureCanvasBase  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from PIL import Image  # noqa: E402

from osd.conversations import load_conversations  # noqa: E402
from osd.datafiles import refuse_foreign_file, refuse_overwrite, write_bytes, write_output  # noqa: E402
from osd.distill.callbacks import METRICS_FILE, read_jsonl  # noqa: E402
from osd.metric_keys import ALPHA, GROUP_KEY, QUERIES_SERVED, upgrade_entry  # noqa: E402
from osd.user_errors import positive_float, run_main  # noqa: E402

Series = tuple[list[float], list[float]]  # x = queries served, y = alpha
TOOL = "osd.plots"  # the writer named beside the images it writes
DPI = 120  # of every figure the project writes
PNG_COLOURS = 256  # a PNG's palette: line plots use few colours, and a palette PNG is a third of an RGBA one


def figure_bytes(fig: Figure, fmt: str = "png") -> bytes:
    """`fig` (closed after) as the bytes of an image file in `fmt`; a PNG with a palette of PNG_COLOURS."""
    image = io.BytesIO()
    try:
        fig.savefig(image, format=fmt, dpi=DPI)
    finally:
        plt.close(fig)
    return palette_png(image.getvalue()) if fmt == "png" else image.getvalue()


def palette_png(png: bytes) -> bytes:
    """An opaque PNG's pixels with a palette of PNG_COLOURS (any alpha channel dropped)."""
    palette = io.BytesIO()
    rgb = Image.open(io.BytesIO(png)).convert("RGB")
    rgb.quantize(PNG_COLOURS, method=Image.Quantize.MEDIANCUT).save(palette, "PNG", optimize=True)
    return palette.getvalue()


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write `figure_bytes(fig)` to `path` (whole or not at all; its format from the suffix, PNG without one)."""
    path = Path(path)
    write_bytes(path, figure_bytes(fig, image_format(path)))
    return path


def read_log(path: str | Path) -> list[dict]:
    """The entries of a metrics.jsonl file, or of `{path}/metrics.jsonl` for a run folder (older logs'
    counter renamed: osd.metric_keys.upgrade_entry)."""
    path = Path(path)
    return [upgrade_entry(e) for e in read_jsonl(path / METRICS_FILE if path.is_dir() else path)]


def alpha_series(entries: Sequence[dict], key: str = ALPHA) -> Series:
    """(queries served, alpha) of the online log entries that carry `key` (finite values only)."""
    xs, ys = [], []
    for entry in entries:
        value = entry.get(key)
        if QUERIES_SERVED in entry and isinstance(value, (int, float)) and math.isfinite(value):
            xs.append(float(entry[QUERIES_SERVED]))
            ys.append(float(value))
    return xs, ys


def group_series_key(entries: Sequence[dict], group: str) -> str:
    """The key of a --groups value: `alpha/{group}` for FIELD/VALUE; for a bare VALUE, the one
    `alpha/{field}/VALUE` the log has, else an older log's `alpha_VALUE`."""
    keys = {k for e in entries for k in e}
    if "/" in group:
        candidates = [f"{ALPHA}/{group}"]
    else:
        candidates = sorted(k for k in keys if (m := GROUP_KEY.match(k)) and m.group(2) == group)
        candidates += [f"{ALPHA}_{group}"]
    found = [k for k in candidates if k in keys]
    if len(found) != 1:
        known = sorted(k for k in keys if GROUP_KEY.match(k))
        raise SystemExit(
            f"--groups {group}: {'no' if not found else 'more than one'} matching key ({found or candidates}); "
            f"the log's per-group keys: {known}"
        )
    return found[0]


def moving_average(xs: Sequence[float], ys: Sequence[float], window: float) -> Series:
    """Mean of the points whose x lies in (x - window, x], at every x (points may be unevenly spaced)."""
    assert window > 0, window  # else no point lies in the window
    out, start, total = [], 0, 0.0
    for i, x in enumerate(xs):
        total += ys[i]
        while xs[start] <= x - window:
            total -= ys[start]
            start += 1
        out.append(total / (i - start + 1))
    return list(xs), out


def dataset_bands(datasets: Sequence[str]) -> list[tuple[int, int, str]]:
    """Consecutive runs of the same dataset in a stream: (first query, last query + 1, name)."""
    bands: list[tuple[int, int, str]] = []
    for i, name in enumerate(datasets):
        if bands and bands[-1][2] == name:
            bands[-1] = (bands[-1][0], i + 1, name)
        else:
            bands.append((i, i + 1, name))
    return bands


def plot_alpha(runs: dict[str, Series], out: str | Path, **figure: Any) -> Path:
    """Write `alpha_figure(runs, **figure)` to `out` (whole or not at all; its format from the suffix,
    PNG without one); returns the path."""
    out = Path(out)
    write_bytes(out, alpha_figure(runs, **figure, fmt=image_format(out)))
    return out


def image_format(path: str | Path, flag: str = "--out") -> str:
    """The image format of the output `path` (given with `flag`): its suffix, PNG without one; raises
    for a suffix matplotlib cannot write."""
    fmt = Path(path).suffix[1:].lower() or "png"
    if fmt not in FigureCanvasBase.get_supported_filetypes():
        raise ValueError(f"{flag} {path}: matplotlib writes no .{fmt} images; name a .png, .pdf or .svg file")
    return fmt


def alpha_figure(
    runs: dict[str, Series],
    window: float = 50,
    references: dict[str, float] | None = None,
    bands: Sequence[tuple[int, int, str]] = (),
    title: str = "",
    segment_references: dict[str, Sequence[tuple[int, int, float]]] | None = None,
    styles: dict[str, dict] | None = None,
    fmt: str = "png",
) -> bytes:
    """Moving-averaged alpha of each run over queries, with reference lines and dataset bands: the
    image's bytes in `fmt` (a matplotlib format).

    references: label -> alpha, a dashed line across the plot (e.g. an offline-distilled draft);
    segment_references: label -> [(first query, end query, alpha)], dotted lines over parts of the
    stream (e.g. Standard SD per dataset segment); styles: run label -> matplotlib line keywords
    (e.g. {"color": "C0", "ls": "--"}).
    """
    fig, ax = plt.subplots(figsize=(8, 4.5))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (start, end, name) in enumerate(bands):
        ax.axvspan(start, end, color=palette[i % len(palette)], alpha=0.08, lw=0)
        ax.text(
            (start + end) / 2,
            1.0,
            name,
            ha="center",
            va="bottom",
            fontsize=8,
            transform=ax.get_xaxis_transform(),
        )
    for label, (xs, ys) in runs.items():
        if xs:
            ax.plot(
                *moving_average(xs, ys, window), label=label, **{"lw": 1.6, **(styles or {}).get(label, {})}
            )
    for i, (label, value) in enumerate((references or {}).items()):
        ax.axhline(
            value,
            ls="--",
            lw=1.2,
            color=["red", "gray", "black", "purple"][i % 4],
            label=f"{label} ({value:.3f})",
        )
    for i, (label, segments) in enumerate((segment_references or {}).items()):
        color = ["black", "gray", "brown", "olive", "purple", "teal"][i % 6]
        for j, (start, end, value) in enumerate(segments):
            ax.hlines(
                value, start, end, colors=color, linestyles=":", lw=1.6, label=label if j == 0 else None
            )
    ax.set_xlabel("queries served")
    ax.set_ylabel(f"alpha (moving average over {window:g} queries)")
    ax.set_title(title, pad=14 if bands else 6)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return figure_bytes(fig, fmt)


def check_served(entries: Sequence[dict], log: str, datasets: list[str], stream: str) -> None:
    """Raise unless the log could be of a run that served `stream` (its `datasets`, in order): it
    served no more queries than the stream holds, and names only the stream's datasets."""
    served = max((e[QUERIES_SERVED] for e in entries if QUERIES_SERVED in e), default=0)
    if served > len(datasets):
        raise ValueError(
            f"--stream {stream} holds {len(datasets)} queries, but the metrics {log} logged {served:.0f} served: "
            "plot a run against the stream it served"
        )
    logged = {m.group(2) for e in entries for k in e if (m := GROUP_KEY.match(k)) and m.group(1) == "dataset"}
    if unknown := sorted(logged - set(datasets)):
        raise ValueError(
            f"the metrics {log} log alpha for datasets {unknown} that --stream {stream} does not hold "
            f"(it holds {sorted(set(datasets))}): plot a run against the stream it served"
        )


def _parse_reference(text: str) -> tuple[str, float]:
    label, sep, value = text.rpartition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--reference takes LABEL=ALPHA (e.g. Standard=0.41), got {text!r}")
    return label, float(value)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "metrics", nargs="+", help="metrics.jsonl files (or run folders holding one); one curve each"
    )
    parser.add_argument(
        "--label", action="append", help="a label per metrics file (default: its folder name)"
    )
    parser.add_argument("--out", required=True, help="PNG to write")
    parser.add_argument("--window", type=positive_float, default=50, help="moving-average window in queries")
    parser.add_argument(
        "--reference", action="append", type=_parse_reference, default=[], help="LABEL=ALPHA line"
    )
    parser.add_argument("--stream", help="the stream's conversation JSON: shade its datasets")
    parser.add_argument(
        "--groups", nargs="*", default=[],
        help="also plot these groups of the first run: FIELD/VALUE (dataset/sql), or VALUE alone",
    )  # fmt: skip
    parser.add_argument("--title", default="")
    args = parser.parse_args(argv)
    logs = {f"metrics {m}": Path(m) / METRICS_FILE if Path(m).is_dir() else m for m in args.metrics}
    refuse_overwrite({"--out": args.out}, logs | {"--stream": args.stream})  # a run folder may hold the PNG
    refuse_foreign_file(args.out, "--out", TOOL)
    fmt = image_format(args.out)
    labels = args.label or [
        Path(m).parent.name if m.endswith(".jsonl") else Path(m).name for m in args.metrics
    ]
    if len(labels) != len(args.metrics):
        raise ValueError(
            f"--label given {len(labels)} times for {len(args.metrics)} metrics files; give one per file"
        )
    logs = [read_log(path) for path in args.metrics]
    runs = {label: alpha_series(entries) for label, entries in zip(labels, logs, strict=True)}
    for path, (xs, _) in zip(args.metrics, runs.values(), strict=True):
        if not xs:  # an offline run's log, an empty one, or one where nothing was ever proposed
            raise ValueError(
                f"the metrics {path} hold no online alpha (entries with queries_served): nothing to plot"
            )
    first = logs[0]
    for group in args.groups:
        runs[f"{labels[0]}: {group}"] = alpha_series(first, group_series_key(first, group))
    bands: list[tuple[int, int, str]] = []
    if args.stream:
        datasets = [r.get("dataset", "?") for r in load_conversations(args.stream)]
        for path, entries in zip(args.metrics, logs, strict=True):
            check_served(entries, path, datasets, args.stream)
        bands = dataset_bands(datasets)
    image = alpha_figure(runs, args.window, dict(args.reference), bands, args.title, fmt=fmt)
    print(f"wrote {write_output(args.out, image, '--out', TOOL)}")


if __name__ == "__main__":
    raise SystemExit(run_main(main, "osd.plots"))
