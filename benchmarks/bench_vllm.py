r"""vLLM serving benchmark: the demo target alone, with the Standard draft, and with the OSD draft
distilled online (updates and swaps on), on one shifting stream, at several concurrencies.

The stream: --per_domain queries of each of sql, math, code, finance (train split, in that order):
by default the gamma and online recipe of `osd.demo.online_demo` on 30 queries of 48 tokens per
domain, its stream when `benchmarks/results/bench_vllm/v3` was recorded (today's main job: --per_domain 45 --max_new_tokens 32).
Two engines serve it (vLLM target-only, and vLLM with the draft as draft_model speculator); before
each run the speculator gets the demo draft's weights back, so every OSD run starts from the
Standard draft (served with its sub-vocabulary head: osd.serving.subvocab). The OSD runs take
--steps_per_update AdamW steps every --online_update_interval queries, the trainer in a worker thread
(--no-background_update: on the loop's thread). Per run: tokens/s (generated tokens / time to the stream's last output),
per-query latency p50/p90 (submission to finished output), acceptance over the stream (osd alpha and
vLLM's rate: osd.serving.acceptance) and per domain, and for OSD the mean swap time (the reload in the
engine), the trainer's share of wall time on the loop's thread (update_share: swaps, and with the
worker the wait for it) and in the worker (background_share: with the target's teacher-forced forwards). On the last --tail queries of each domain (the demo's tables): alpha per
domain, and their tokens over their summed latencies (tail_tokens_per_s: at concurrency 1 the
serving rate the demo's tables report; above it, one request's rate). tokens/s counts the loop's time
waiting on the engine; the rest of the wall time (buffering, updates, swaps) is trainer_catch_up_s. With --reference (a demo summary.json recorded on the same stream) the
concurrency-1 runs are compared with osd.spec's: per-domain alpha, and the speedup over the target
alone. With --head (a speculators-format EAGLE-3 head for the demo target) the head is served beside the
draft, on a third engine (vLLM's eagle3 method): its Standard run (the head as given) and its OSD run
(`python -m osd.serving --drafter head`'s distiller, the same recipe), with the same columns; and the Standard
head at concurrency 1 is compared with osd's engine on the stream (`compare_head_to_engine`: osd alpha per domain
and overall, printed and written as head_vs_osd_spec). Writes {out}/results.json, table.md and throughput.png
(tokens/s against concurrency); the engines' scratch files (served draft folder, exported weights) go to a
temporary folder.

    OMP_NUM_THREADS=1 VLLM_CPU_OMP_THREADS_BIND=nobind VLLM_CPU_KVCACHE_SPACE=1 \
    .venv-vllm/bin/python -m benchmarks.bench_vllm --concurrency 1 4 16 --out outputs/bench_vllm \
        --reference benchmarks/results/bench_vllm/v3/reference_online_demo_30x48.json
    ... -m benchmarks.bench_vllm --concurrency 1 --per_domain 8 --gamma 3 --head HEAD --out outputs/bench_vllm_head
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import torch
from transformers import PreTrainedModel

from osd.alpha import pooled_alpha
from osd.conversations import save_conversations
from osd.demo.online_demo import LEARNING_RATE, PRESET
from osd.demo.report import last_of_domain, online_on, tokens_per_s, total_row
from osd.metric_keys import ALPHA, VLLM_ACCEPTANCE_RATE, group_key
from osd.models import load_model, load_tokenizer
from osd.online.config import add_online_flags, online_arguments
from osd.online.loop import Query
from osd.online.records import tail_length
from osd.paths import DOMAINS, DRAFT_PATH, TARGET_PATH
from osd.results import markdown_table, save_results
from osd.serving.acceptance import query_stats
from osd.serving.config import ServingArguments
from osd.serving.distiller import DraftDistiller, export_draft, load_drafter
from osd.serving.engine import build_engine, sampling_params, serve_all, shutdown_engine, swap_draft
from osd.serving.online import load_queries, serve_stream
from osd.serving.subvocab import served_draft_folder
from osd.spec import SpeculativeDecoder
from osd.spec.eagle3 import load_head
from osd.spec.gamma import DEMO, add_gamma_flag
from osd.streams import abrupt_stream, load_sources
from osd.user_errors import run_main

if TYPE_CHECKING:
    from vllm import LLM

COLUMNS = ["run", "concurrency", "tokens_per_s", "latency_p50_s", "latency_p90_s", "alpha", "vllm_acceptance",
           *DOMAINS, "tail_tokens_per_s", *(f"tail_{d}" for d in DOMAINS), "updates", "swap_time_s",
           "update_share", "background_share", "trainer_catch_up_s"]  # fmt: skip


def serve(llm, queries, args: ServingArguments, distiller: DraftDistiller | None, tails: dict) -> dict:
    """One pass over the stream; the measures of one table row. `tails`: stream indices per domain."""
    entries = []
    start = time.perf_counter()
    state, server = serve_stream(llm, args, distiller, queries, entries.append)
    wall = time.perf_counter() - start
    served_s = state.serve_time_s  # the loop's time waiting on the engine, not on its trainer
    latencies = [q.wall_time_s for q in state.queries]
    p50, p90 = (statistics.quantiles(latencies, n=10)[i] for i in (4, 8))
    last = entries[-1]  # --online_eval_interval = the stream: one entry over every query
    on_tails = {d: online_on(state.queries, indices) for d, indices in tails.items()}
    return {
        "tokens_per_s": sum(q.num_generated for q in state.queries) / served_s, "latency_p50_s": p50,
        "latency_p90_s": p90, "alpha": last[ALPHA], "vllm_acceptance": last[VLLM_ACCEPTANCE_RATE],
        **{d: last.get(group_key("dataset", d)) for d in DOMAINS},  # None: no alpha for the domain
        # per-query latencies: at concurrency 1 the serving time of each query, as the demo's tables count it
        "tail_tokens_per_s": sum(t["tokens"] for t in on_tails.values()) / sum(t["s"] for t in on_tails.values()),
        **{f"tail_{d}": t["alpha"] for d, t in on_tails.items()},
        "updates": state.updates, "update_share": state.update_time_s / wall, "wall_s": wall,
        "background_share": state.background_update_time_s / wall,
        "trainer_catch_up_s": wall - served_s,
        "swap_time_s": statistics.mean(server.swap_times) if server.swap_times else float("nan"),
    }  # fmt: skip


def compare_to_demo(rows: list[dict], summary_path: str, opts: argparse.Namespace) -> dict:
    """The concurrency-1 runs against `osd.demo.online_demo`'s summary.json on the same stream: per-domain
    alpha on the tails (vLLM's OSD run minus the demo's online run) and the speedups over the target alone."""
    demo = json.loads(Path(summary_path).read_text())
    mine = {"per_domain": opts.per_domain, "gamma": opts.gamma, "max_new_tokens": opts.max_new_tokens,
            "tail": opts.tail, "update_interval": opts.online_update_interval,
            "steps_per_update": opts.online_steps_per_update, "learning_rate": opts.learning_rate,
            "loss_positions": opts.online_loss_positions}  # the demo summary's names  # fmt: skip
    differ = {k: (v, demo["args"].get(k)) for k, v in mine.items() if demo["args"].get(k) != v}
    if differ or demo["args"]["domains"] != list(DOMAINS):
        raise SystemExit(f"--reference {summary_path}: recorded with other settings (ours, its): {differ}")
    c1 = {r["run"]: r for r in rows if r["concurrency"] == 1}
    if len(c1) < 3:
        raise SystemExit("--reference compares the concurrency-1 runs: add 1 to --concurrency")
    spec = {r["domain"]: r for r in demo["domains"]}
    base, standard, online = tokens_per_s(total_row(demo["domains"]))
    vllm_base = c1["target only"]["tail_tokens_per_s"]
    return {
        "reference": summary_path,
        "alpha": {d: {"osd_spec_online": spec[d]["online"]["alpha"], "vllm_osd": c1["+ OSD draft"][f"tail_{d}"],
                      "osd_spec_standard": spec[d]["standard"]["alpha"], "vllm_standard": c1["+ Standard draft"][f"tail_{d}"]}
                  for d in DOMAINS},
        "speedup": {"osd_spec_standard": standard / base, "osd_spec_online": online / base,
                    "vllm_standard": c1["+ Standard draft"]["tail_tokens_per_s"] / vllm_base,
                    "vllm_osd": c1["+ OSD draft"]["tail_tokens_per_s"] / vllm_base},
    }  # fmt: skip


def plot_throughput(rows: list[dict], path: Path) -> None:
    """tokens/s against concurrency, one line per run (target only, + Standard, + OSD)."""
    import matplotlib.pyplot as plt

    from osd.plots import save_figure  # it selects matplotlib's file-only backend

    fig, ax = plt.subplots(figsize=(6, 4))
    for run in dict.fromkeys(r["run"] for r in rows):
        points = [(r["concurrency"], r["tokens_per_s"]) for r in rows if r["run"] == run]
        ax.plot(*zip(*points, strict=True), marker="o", label=run)
    ax.set(xscale="log", xlabel="requests in flight (concurrency)", ylabel="generated tokens / s",
           title="vLLM on the demo pair: target alone vs speculative decoding")  # fmt: skip
    ax.set_xticks(sorted({r["concurrency"] for r in rows}), labels=sorted({r["concurrency"] for r in rows}))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per_domain", type=int, default=30)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    add_gamma_flag(ap, DEMO, auto="vLLM speculates a fixed number of tokens")
    ap.add_argument("--max_new_tokens", type=int, default=48)
    ap.add_argument("--learning_rate", type=float, default=LEARNING_RATE)
    # the main job's recipe (its steps on every served token, in a worker thread); vLLM serves the draft itself,
    # and the update runs in a thread (vLLM's engine is not forked)
    add_online_flags(ap, replace(PRESET, draft_serving_dtype=None, online_update_process=False))
    ap.add_argument("--tail", type=int, default=0, help="queries at the end of each domain's block "
                    "compared per domain (default: the demo's, the last third)")  # fmt: skip
    ap.add_argument("--reference", help="an osd.demo.online_demo summary.json recorded on this stream")
    ap.add_argument("--head", help="a speculators-format EAGLE-3 head folder for the demo target: also serve it "
                    "(+ Standard head, + OSD head: osd.serving --drafter head) and compare it with osd's engine")  # fmt: skip
    ap.add_argument("--out", default="outputs/bench_vllm")
    opts = ap.parse_args()
    opts.tail = opts.tail or tail_length(opts.per_domain)
    torch.set_num_threads(1)
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    stream = abrupt_stream(load_sources(DOMAINS), [opts.per_domain] * len(DOMAINS))
    save_conversations(stream, out / "stream.json")
    tails = {d: last_of_domain(stream, d, opts.tail) for d in DOMAINS}
    with tempfile.TemporaryDirectory(prefix="bench_vllm_") as scratch:
        online = online_arguments(opts, online_eval_interval=len(stream))
        args = ServingArguments(
            data_path=str(out / "stream.json"), output_dir=scratch, max_propose_num=opts.gamma,
            max_new_tokens=opts.max_new_tokens, learning_rate=opts.learning_rate, **vars(online),
        )  # fmt: skip
        rows, head = run_all(args, opts, tails, Path(scratch))
    result = {"options": vars(opts), "rows": rows}
    if head:
        result["head_vs_osd_spec"] = head
        print(json.dumps(head, indent=1))
    if opts.reference:
        result["osd_spec"] = compare_to_demo(rows, opts.reference, opts)
        print(json.dumps(result["osd_spec"], indent=1))
    save_results(out, result, markdown_table(rows, COLUMNS), "benchmarks.bench_vllm")
    plot_throughput(rows, out / "throughput.png")


def run_all(
    args: ServingArguments, opts: argparse.Namespace, tails: dict, scratch: Path
) -> tuple[list[dict], dict | None]:
    """The runs at each concurrency: the target alone, then per drafter (the draft model; with --head the head)
    its Standard run and its OSD run on one engine. With --head also `compare_head_to_engine`."""
    queries = load_queries(args.data_path, load_tokenizer(str(TARGET_PATH), None), 512)
    target_only = build_engine(str(TARGET_PATH), None, 0)
    drafters = [("draft", served_draft_folder(str(DRAFT_PATH), scratch), args)]
    if opts.head:  # osd.serving's --drafter head
        drafters.append(("head", opts.head, replace(args, drafter="head", head_path=opts.head)))
    target = load_model(str(TARGET_PATH), args.teacher_dtype, None)
    engines = []  # (name, engine, its drafter's Standard weights, the drafter's flags)
    for name, folder, drafter_args in drafters:
        standard = scratch / f"standard_{name}.safetensors"
        export_draft(load_drafter(drafter_args, target), standard, torch.bfloat16)
        engines.append((name, build_engine(str(TARGET_PATH), folder, opts.gamma), standard, drafter_args))
    for llm in (target_only, *(e[1] for e in engines)):  # warm-up: the first requests pay one-time costs
        serve_stream(llm, args, None, queries[:2])
    rows = []
    for c in opts.concurrency:
        args.concurrency = c
        rows.append(
            {"run": "target only", "concurrency": c, **serve(target_only, queries, args, None, tails)}
        )
        for name, llm, standard, drafter_args in engines:
            drafter_args.concurrency = c
            for run, learns in ((f"+ Standard {name}", False), (f"+ OSD {name}", True)):
                swap_draft(llm, str(standard))  # every run starts from the Standard drafter
                distiller = DraftDistiller.from_args(drafter_args, target) if learns else None
                rows.append(
                    {"run": run, "concurrency": c, **serve(llm, queries, drafter_args, distiller, tails)}
                )
        print(markdown_table([r for r in rows if r["concurrency"] == c], COLUMNS), flush=True)
    head = None
    if opts.head:
        _, llm, standard, drafter_args = engines[-1]
        swap_draft(llm, str(standard))
        prompts, greedy = [q.prompt_ids for q in queries], sampling_params(args.max_new_tokens, 0.0)
        alone = [s.token_ids for s in serve_all(target_only, prompts, greedy, 1)]
        head = compare_head_to_engine(llm, alone, queries, drafter_args, opts.head, target)
    for llm in (target_only, *(e[1] for e in engines)):
        shutdown_engine(llm)
    return rows, head


def compare_head_to_engine(
    llm: LLM,
    alone: list[list[int]],
    queries: list[Query],
    args: ServingArguments,
    head_path: str,
    target: PreTrainedModel,
) -> dict:
    """The Standard head on the stream at concurrency 1, on vLLM (`llm`, serving it) and in osd's engine
    (`SpeculativeDecoder`, greedy, the same gamma and max_new_tokens, EOS the target's): osd alpha per domain and
    over the stream. vLLM's also without each query's first verification step: vLLM's head drafts from the
    prompt's prefill, osd's proposes nothing before it (docs/engine.md). Greedy decoding emits the target's tokens
    up to bf16 near-ties, which vLLM's and osd's kernels break apart: `same_outputs` counts the queries whose tokens
    the two engines share, `*_as_target_alone` those equal to `alone` (vLLM's target without a draft), and the
    alphas are pooled over the queries of either kind too."""
    served = serve_all(llm, [q.prompt_ids for q in queries], sampling_params(args.max_new_tokens, 0.0), 1)
    decoder = SpeculativeDecoder(load_head(head_path), target, args.max_propose_num)
    eos = target.generation_config.eos_token_id
    rows = []  # per query: its domain, its outputs' equalities, (alpha_sum, counted) per measure
    for query, s, own in zip(queries, served, alone, strict=True):
        out = decoder.generate(torch.tensor([query.prompt_ids]), args.max_new_tokens, eos_token_id=eos)
        later = SimpleNamespace(per_step_accepted=s.counts.per_step_accepted[1:],
                                per_step_drafted=s.counts.per_step_drafted[1:])  # fmt: skip
        measures = {"vllm": query_stats(s.counts, len(s.token_ids), {}, 0.0),
                    "vllm_without_first_step": query_stats(later, len(s.token_ids), {}, 0.0)}  # fmt: skip
        counts = {k: (m.alpha_sum, m.num_proposed) for k, m in measures.items()}
        counts["osd_spec"] = (out.alpha_sum, out.num_proposed)
        ids = out.generated_ids[0].tolist()
        same = {"same_outputs": ids == s.token_ids, "vllm_as_target_alone": s.token_ids == own,
                "osd_spec_as_target_alone": ids == own}  # fmt: skip
        rows.append((query.groups["dataset"], same, counts))

    def pooled(selected: list) -> dict:
        alphas = {k: pooled_alpha(sum(r[2][k][0] for r in selected), sum(r[2][k][1] for r in selected))
                  for k in ("vllm", "vllm_without_first_step", "osd_spec")}  # fmt: skip
        return {**alphas, **{k: f"{sum(r[1][k] for r in selected)}/{len(selected)}" for k in rows[0][1]}}

    overall = pooled(rows)
    return {
        "head": head_path, "gamma": args.max_propose_num, "max_new_tokens": args.max_new_tokens,
        "per_domain": {d: pooled([r for r in rows if r[0] == d]) for d in DOMAINS}, "overall": overall,
        "overall_same_outputs": pooled([r for r in rows if r[1]["same_outputs"]]),
        "overall_other_outputs": pooled([r for r in rows if not r[1]["same_outputs"]]),
        "vllm_minus_osd_spec": overall["vllm"] - overall["osd_spec"],
    }  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks.bench_vllm"))
