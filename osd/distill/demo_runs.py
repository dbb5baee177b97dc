"""Online and offline runs on the embedded demo pair (SmolLM2-135M-Instruct in bf16; the draft trains in
float32 and serves as a bf16 copy), and the per-query log entries they leave: what the online
experiment drivers (benchmarks/online_*.py, ablation_drafts.py) compare.

Every run is what `python -m osd.train --mode online` (or `osd.distill.routing` for routed drafts) runs,
from typed arguments (`osd.distill.experiment.run`, `osd.distill.routing.run_routed`), its online
settings an `OnlineArguments`: `BENCHMARK_PRESET` (one log entry per query, a bf16 serving copy) with
the driver's recipe (`osd.online.config.add_online_flags`). A static run (`static`: no update) serves
the same stream with the draft as it is: Standard speculative decoding with that draft, as the
reference's baseline scripts did. Static baselines distilled offline beforehand (`static_runs`) all
get the same budget: `steps` on-policy steps of 8 records, whatever their data.

Per-group alpha (by dataset / topic / language) is read by joining each query's log entry with its
stream record (`label_queries`), not from the trainer's per-group log keys, so no driver depends on
how those keys are named.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from osd.alpha import pooled_alpha
from osd.conversations import record_groups, save_conversations
from osd.distill.callbacks import METRICS_FILE, read_jsonl
from osd.distill.config import DataArguments, DistillTrainingArguments, ModelArguments
from osd.distill.experiment import run
from osd.distill.routing import RoutingArguments, run_routed
from osd.metric_keys import ALPHA_WINDOW, upgrade_entry
from osd.online.config import OnlineArguments
from osd.paths import DRAFT_PATH, TARGET_PATH
from osd.spec.gamma import ALPHA_FIGURES, STANDARD_TIMING

STATIC = 0  # --online_update_interval of a static run: the draft stays as it is (Standard SD)
LOG_NEVER = 10**9  # --logging_steps: no loss log lines (each query's alpha is logged anyway)
# the online settings of every driver's runs: one log entry per query, served by a bf16 copy of the draft
BENCHMARK_PRESET = OnlineArguments(online_eval_interval=1, draft_serving_dtype="bfloat16")


def static(online: OnlineArguments = BENCHMARK_PRESET) -> OnlineArguments:
    """`online`'s serving and logging without any update: Standard SD with the draft as it is."""
    return replace(online, online_update_interval=STATIC, online_background_update=False)


def fresh_run_dir(out_dir: Path, records: list[dict], data_name: str) -> None:
    """An empty run folder (a rerun starts over, never resumes an old run) holding the run's data file."""
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    save_conversations(records, out_dir / data_name)


def run_online(
    out_dir: Path,
    stream: list[dict],
    online: OnlineArguments = BENCHMARK_PRESET,
    student: str | Path | None = None,
    learning_rate: float = 1e-4,
    max_new_tokens: int = 64,
    gamma: int = ALPHA_FIGURES,
    route_by: str | None = None,
) -> list[dict]:
    """Serve `stream` with `student` (default: the demo draft) and distil it as `online` says, as
    `osd.train --mode online` (or `osd.distill.routing` with `route_by`) would; returns its per-query log
    entries, labelled with their records' groups (`label_queries`)."""
    if online.online_eval_interval != 1:
        raise ValueError(
            f"--online_eval_interval {online.online_eval_interval}: these runs read one log entry per query (1)"
        )
    fresh_run_dir(out_dir, stream, "stream.json")
    model_args = ModelArguments(
        student_model_path=str(student or DRAFT_PATH),
        teacher_model_path=str(TARGET_PATH),
        teacher_dtype="bfloat16",
    )
    data_args = DataArguments(data_path=str(out_dir / "stream.json"))
    args = DistillTrainingArguments(
        output_dir=str(out_dir), mode="online", kl_method="forward", max_propose_num=gamma,
        max_new_tokens=max_new_tokens, **vars(online),
        per_device_train_batch_size=1, num_train_epochs=1, learning_rate=learning_rate, lr_scheduler_type="constant",
        weight_decay=0.0, max_grad_norm=0.0, save_strategy="no", logging_steps=LOG_NEVER, report_to="none",
        use_cpu=True, disable_tqdm=True, seed=0,
    )  # fmt: skip
    print(
        f"[online] {out_dir}: {len(stream)} queries, update interval {online.online_update_interval}",
        file=sys.stderr,
    )
    if route_by is None:
        run(model_args, data_args, args)
    else:
        run_routed(model_args, data_args, args, RoutingArguments(route_by=route_by))
    return label_queries(read_entries(out_dir), stream)


def run_offline(
    out_dir: Path,
    records: list[dict],
    max_steps: int = 60,
    learning_rate: float = 1e-4,
    max_new_tokens: int = 48,
) -> Path:
    """A static baseline: the demo draft distilled offline (on-policy: student samples, forward KL) on
    `records`, with bash_scripts/demo/offline.sh's settings but gradients clipped at 1.0, as recorded;
    returns the draft's folder (out_dir)."""
    fresh_run_dir(out_dir, records, "train.json")
    model_args = ModelArguments(
        student_model_path=str(DRAFT_PATH), teacher_model_path=str(TARGET_PATH), teacher_dtype="bfloat16"
    )
    data_args = DataArguments(data_path=str(out_dir / "train.json"), model_max_length=256)
    args = DistillTrainingArguments(
        output_dir=str(out_dir), mode="offline", sample_source="student", kl_method="forward",
        max_propose_num=STANDARD_TIMING, max_steps=max_steps, per_device_train_batch_size=8,
        learning_rate=learning_rate, lr_scheduler_type="constant", max_new_tokens=max_new_tokens,
        max_grad_norm=1.0,  # the recorded baselines clipped at HF's 1.0 (the default before issue 13)
        eval_strategy="no", eval_on_start=False, save_strategy="no", logging_steps=10, report_to="none",
        use_cpu=True, disable_tqdm=True, seed=0,
    )  # fmt: skip
    print(f"[offline] {out_dir}: {len(records)} records, {max_steps} steps", file=sys.stderr)
    run(model_args, data_args, args)
    return out_dir


def prefix_samples(stream: Sequence[dict], fractions: Sequence[float]) -> dict[str, list[dict]]:
    """The stream's first round(f * len) records (at least one) for each fraction f, by baseline name:
    the traffic a static draft is distilled on once (the reference's sample_online_distill.sh at 10%,
    its sharp_sample.sh drafts at 30/50/70% and the 100% one of plot_shift.py)."""
    for f in fractions:
        if not 0 < f <= 1:
            raise ValueError(f"static draft fraction {f}: expected a share of the stream in (0, 1]")
    return {f"offline, first {f:.0%}": list(stream[: max(1, round(f * len(stream)))]) for f in fractions}


def static_runs(
    out: Path,
    stream: list[dict],
    samples: dict[str, list[dict]],
    steps: int,
    learning_rate: float,
    online: OnlineArguments = BENCHMARK_PRESET,
    max_new_tokens: int = 64,
    gamma: int = ALPHA_FIGURES,
) -> dict[str, list[dict]]:
    """Static baselines: for each named sample, a draft distilled offline on it (`run_offline`, `steps`
    steps of 8 records: the same budget for every sample) in {out}/offline{i}_draft, then `stream`
    served with that draft, never updated ({out}/offline{i}, `static(online)`); the per-query entries
    by name."""
    runs = {}
    for i, (name, records) in enumerate(samples.items()):
        draft = run_offline(out / f"offline{i}_draft", records, max_steps=steps, learning_rate=learning_rate)
        runs[name] = run_online(
            out / f"offline{i}", stream, static(online), student=draft, learning_rate=learning_rate,
            max_new_tokens=max_new_tokens, gamma=gamma,
        )  # fmt: skip
    return runs


def read_entries(out_dir: Path) -> list[dict]:
    """The online log entries (one per query) of a run folder (older logs' keys upgraded)."""
    return [e for e in map(upgrade_entry, read_jsonl(Path(out_dir) / METRICS_FILE)) if ALPHA_WINDOW in e]


def label_queries(entries: Sequence[dict], stream: Sequence[dict]) -> list[dict]:
    """Each query's log entry (one per query, in stream order) with its stream position added as
    "query" (1-based) and its record's grouping fields as "groups" ({"dataset": ..., "topic": ...})."""
    if len(entries) != len(stream):
        raise ValueError(
            f"expected one log entry per query for {len(stream)} queries (--online_eval_interval 1), "
            f"got {len(entries)} entries"
        )
    return [
        {**e, "query": i + 1, "groups": record_groups(r)}
        for i, (e, r) in enumerate(zip(entries, stream, strict=True))
    ]


def of_group(entries: Sequence[dict], group: str) -> list[dict]:
    """The entries (from `label_queries`) of the queries one of whose grouping fields is `group`."""
    return [e for e in entries if group in e["groups"].values()]


def alpha_over(entries: Sequence[dict], start: int, end: int, group: str | None = None) -> float | None:
    """Token-weighted alpha over queries start+1..end of `label_queries` entries (optionally only
    those of one group value); None when none of them proposed a token."""
    picked = [
        e for e in (entries if group is None else of_group(entries, group)) if start < e["query"] <= end
    ]
    picked = [e for e in picked if e["proposed"]]
    proposed = sum(e["proposed"] for e in picked)
    return pooled_alpha(sum(e["alpha"] * e["proposed"] for e in picked), proposed)
