"""Merge the ablation runs (`{out}/parts/*.json`, written with `osd.results.write_part` by
`benchmarks/ablations.py` and the training drivers) into `{out}/results.json` (every run with its
command, and the merged tables), `{out}/table.md` and one plot per ablation present: gamma.png,
context.png, draft_size.png, methods.png.

    python -m benchmarks.ablations report --out benchmarks/results/ablations/v1

Part names: gamma*/context* (their `ablation` field), draft_size* (drafts named SIZE:standard and
SIZE:online) with draft_training (`benchmarks/ablation_drafts.py`), methods* (drafts named as
`benchmarks.online_single`'s runs: Standard, offline-distilled, online) with methods_training
(`benchmarks/online_single.py --results`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only
import matplotlib.pyplot as plt  # noqa: E402

from osd.plots import save_figure  # noqa: E402
from osd.results import markdown_table  # noqa: E402

GAMMA_COLUMNS = {"gamma": "gamma", "alpha_simulated": "alpha (simulated)", "alpha": "alpha (live)",
                 "mean_accepted_length": "accepted / step", "target_tokens_per_s": "target tok/s",
                 "tokens_per_s": "tok/s", "speedup": "speedup",
                 "eq2": "Eq. 2", "verify_cost": "verify cost", "eq2_verify": "Eq. 2 (verify)",
                 "measured_over_eq2_verify": "measured / Eq. 2 (verify)"}  # fmt: skip
CONTEXT_COLUMNS = {"prompt_tokens": "prompt tokens", "target_step_ms": "target step (ms)",
                   "draft_step_ms": "draft step (ms)", "c": "c", "verify_cost": "verify cost", "alpha": "alpha",
                   "target_tokens_per_s": "target tok/s", "speedup": "speedup", "eq2": "Eq. 2",
                   "eq2_verify": "Eq. 2 (verify)", "measured_over_eq2": "measured / Eq. 2",
                   "measured_over_eq2_verify": "measured / Eq. 2 (verify)"}  # fmt: skip
DRAFT_COLUMNS = {"name": "draft", "params_m": "params (M)", "c": "c", "alpha": "alpha", "tokens_per_s": "tok/s",
                 "speedup": "speedup", "eq2": "Eq. 2", "eq2_verify": "Eq. 2 (verify)",
                 "measured_over_eq2_verify": "measured / Eq. 2 (verify)"}  # fmt: skip
SIZE_COLUMNS = DRAFT_COLUMNS | {"train_final_train_loss": "pre-training loss",
                                "train_stream_alpha_first_half": "stream alpha, 1st half (online run)",
                                "train_stream_alpha_second_half": "stream alpha, 2nd half (online run)"}  # fmt: skip
METHOD_COLUMNS = DRAFT_COLUMNS | {"update_time_share": "update time / serving time"}


def load_parts(out: Path) -> dict[str, dict]:
    """Every `{out}/parts/*.json` by file stem; raises naming the folder when there is none."""
    files = sorted((out / "parts").glob("*.json"))
    if not files:
        raise FileNotFoundError(f"{out}/parts: no ablation runs recorded; run benchmarks.ablations first")
    return {f.stem: json.loads(f.read_text()) for f in files}


def rows_of(parts: dict[str, dict], keep: Callable[[str, dict], bool], key: str) -> list[dict]:
    """The rows of every part `keep` selects, each tagged with its part, sorted by `key`."""
    rows = [r | {"part": name} for name, p in parts.items() if keep(name, p) for r in p.get("rows", [])]
    return sorted(rows, key=lambda r: r[key])


def table(rows: Sequence[dict], columns: dict[str, str]) -> str:
    return markdown_table([{columns[k]: r.get(k, "") for k in columns} for r in rows], list(columns.values()))


def plot_gamma(rows: list[dict], path: Path) -> None:
    g = [r["gamma"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(g, [r["alpha_simulated"] for r in rows], "o-", label="simulated (one recording)")
    left.plot(g, [r["alpha"] for r in rows], "x--", label="live engine")
    left.set(xlabel="gamma", ylabel="alpha", title="acceptance rate")
    for key, label in (("speedup", "measured"), ("eq2", "Eq. 2"), ("eq2_verify", "Eq. 2, measured verify")):
        right.plot(g, [r[key] for r in rows], "o-", label=label)
    right.axhline(1.0, c="gray", ls=":")
    right.set(xlabel="gamma", ylabel="speedup over target-only", title="speedup")
    finish(fig, (left, right), path)


def plot_context(rows: list[dict], path: Path) -> None:
    n = [r["prompt_tokens"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    axes[0].plot(n, [r["target_step_ms"] for r in rows], "o-", label="target step")
    axes[0].plot(n, [r["draft_step_ms"] for r in rows], "o-", label="draft step")
    axes[0].set(ylabel="ms", title="step cost")
    axes[1].plot(
        n, [r["verify_cost"] for r in rows], "o-", label=f"verify cost ({rows[0]['gamma'] + 1} tokens)"
    )
    axes[1].plot(n, [10 * r["c"] for r in rows], "o-", label="10 x c")
    axes[1].set(title="costs in target steps")
    for key, label in (("speedup", "measured"), ("eq2", "Eq. 2"), ("eq2_verify", "Eq. 2, measured verify")):
        axes[2].plot(n, [r[key] for r in rows], "o-", label=label)
    axes[2].axhline(1.0, c="gray", ls=":")
    axes[2].set(title=f"speedup, gamma {rows[0]['gamma']}")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set(xlabel="prompt tokens", xticks=n, xticklabels=[str(x) for x in n])
        ax.minorticks_off()
    finish(fig, axes, path)


def plot_draft_size(rows: list[dict], path: Path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for kind, marker, color in (("standard", "o", "C0"), ("online", "s", "C1")):
        mine = sorted((r for r in rows if r["kind"] == kind), key=lambda r: r["params_m"])
        left.plot([r["c"] for r in mine], [r["alpha"] for r in mine], marker + "-", c=color, label=kind)
        for r in mine:
            left.annotate(r["size"], (r["c"], r["alpha"]), fontsize=8)
        p = [r["params_m"] for r in mine]
        right.plot(p, [r["speedup"] for r in mine], marker + "-", c=color, label=f"{kind}: measured")
        right.plot(p, [r["eq2_verify"] for r in mine], marker + ":", c=color, label=f"{kind}: Eq. 2 (verify)")
    left.set(xlabel="c (draft step / target step)", ylabel="alpha", title="alpha vs c")
    right.axhline(1.0, c="gray", ls=":")
    right.set(xlabel="draft parameters (M)", ylabel="speedup over target-only", title="speedup vs draft size")
    finish(fig, (left, right), path)


def plot_methods(quarters: list[dict], rows: list[dict], path: Path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for q in quarters:
        keys = [k for k in q if k != "run"]
        left.plot(range(1, len(keys) + 1), [q[k] for k in keys], "o-", label=q["run"])
    if quarters:
        keys = [k for k in quarters[0] if k != "run"]
        left.set_xticks(range(1, len(keys) + 1), keys, fontsize=8)
    left.set(xlabel="queries of the stream", ylabel="alpha", title="alpha while serving the stream")
    right.bar([r["name"] for r in rows], [r["speedup"] for r in rows])
    right.axhline(1.0, c="gray", ls=":")
    right.set(
        ylabel="speedup over target-only",
        title="held-out eval queries (updates: charged from the stream run)",
    )
    right.tick_params(axis="x", labelrotation=15)
    finish(fig, (left, right), path)


def finish(fig, axes, path: Path) -> None:
    for ax in axes:
        ax.legend(fontsize=8) if ax.get_legend_handles_labels()[0] else None
        ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path)


def draft_size_rows(parts: dict[str, dict]) -> list[dict]:
    """Timed SIZE:KIND rows joined with the size's training record."""
    training = parts.get("draft_training", {}).get("sizes", {})
    rows = rows_of(parts, lambda n, p: n.startswith("draft_size"), "params_m")
    for r in rows:
        r["size"], _, r["kind"] = r["name"].partition(":")
        r |= {f"train_{k}": v for k, v in training.get(r["size"], {}).items() if not isinstance(v, dict)}
    return rows


def methods_rows(parts: dict[str, dict]) -> list[dict]:
    """Timed drafts, plus online serving charged with its synchronous updates (from the stream run)."""
    rows = rows_of(parts, lambda n, p: n.startswith("methods") and "rows" in p, "name")
    cost = parts.get("methods_training", {}).get("cost")
    online = next((r for r in rows if r["name"] == "online"), None)
    if cost and online:
        share = cost["update_time_share"]
        charged = online["tokens_per_s"] / (1 + share)
        rows.append({"name": "online, updates included", "alpha": online["alpha"], "tokens_per_s": charged,
                     "speedup": charged / online["target_tokens_per_s"], "update_time_share": share})  # fmt: skip
    return rows


def report(out: Path) -> dict:
    """Merge `{out}/parts` into `{out}/results.json`, `table.md` and the plots; returns the results."""
    parts = load_parts(out)
    tables = {
        "gamma": rows_of(parts, lambda n, p: p.get("ablation") == "gamma", "gamma"),
        "context": rows_of(parts, lambda n, p: p.get("ablation") == "context", "prompt_tokens"),
        "draft_size": draft_size_rows(parts),
        "methods": methods_rows(parts),
    }
    md = ["# Ablations on the demo pair", "", "Commands (each run's settings are in results.json):", ""]
    md += [f"- `{name}`: `{p['command']}`" for name, p in parts.items()]
    plots = {"gamma": (plot_gamma, GAMMA_COLUMNS), "context": (plot_context, CONTEXT_COLUMNS),
             "draft_size": (plot_draft_size, SIZE_COLUMNS), "methods": (None, METHOD_COLUMNS)}  # fmt: skip
    for name, rows in tables.items():
        if not rows:
            continue
        draw, columns = plots[name]
        if name == "methods":
            quarters = parts.get("methods_training", {}).get("quarters", [])
            plot_methods(quarters, rows, out / "methods.png")
            if quarters:
                md += [
                    "",
                    "## methods: alpha over the stream (quarters)",
                    "",
                    table(quarters, {k: k for k in quarters[0]}),
                ]
        else:
            draw(rows, out / f"{name}.png")
        md += ["", f"## {name}", "", table(rows, columns)]
    (out / "table.md").write_text("\n".join(md) + "\n")
    results = {"tables": tables, "runs": parts}
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    print("\n".join(md))
    return results
