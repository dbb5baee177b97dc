"""Batched decoding benchmark: the target alone vs `SpeculativeDecoder.generate_batch`, greedy.

For each batch size B, the same prompts (the demo workload's eval queries, left-padded into batches
of B) are decoded to a fixed length (--max_new_tokens, EOS ignored, so every row costs the same) by
the target alone and by speculative decoding with the demo pair. The target alone is the faster of
HF's batched `generate` and the engine's plain decoding (gamma 0, always run: the target through the
engine's cache, the lean step where it applies). Prints tokens/s and the speedup of speculative
decoding over it at each B, with Eq. 2 charged with the verify cost measured at that B as the engine
runs it; writes {out}/results.json, table.md and speedup.png. `auto` keeps one `GammaPolicy` from batch
size to batch size, as a server would. Every method's calls are interleaved batch by batch; a query's
latency is the call that decoded its batch. While the target's forward is bound by reading its weights,
a verification of B x (gamma + 1) tokens costs little more than B x 1;
once B x (gamma + 1) tokens make it compute-bound (on one CPU core, from B = 4 or so for the demo
target), it costs up to gamma + 1 times as much: Eq. 2 with the measured verify cost says where
batching ends the speedup.

    python -m benchmarks.bench_batch --threads 1                      # B = 1 2 4 8 16; gamma 0, 1, 2 and auto
    python -m benchmarks.bench_batch --batch_sizes 1 4 --gammas 3 auto --draft outputs/online_demo/draft
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch

from osd.alpha import pooled_alpha
from osd.conversations import load_conversations, user_query
from osd.cost_model import speedup_measured_verify
from osd.distill.data import pad
from osd.models import load_demo_pair
from osd.paths import DRAFT_PATH, TARGET_PATH, WORKLOAD_DIR
from osd.prompting import encode_prompt
from osd.results import markdown_table, save_results
from osd.spec import GammaPolicy, SpeculativeDecoder
from osd.spec.draft_vocab import apply_draft_vocab
from osd.spec.timing import draft_step_time, step_time, synchronize, target_pass_time
from osd.spec.weight_major import use_weight_major_linears
from osd.user_errors import run_main

T = TypeVar("T")


def timed(fn: Callable[[], T], device: torch.device) -> tuple[T, float]:
    """(fn(), seconds) of one call. Not torch.utils.benchmark.Timer.timeit: it runs its statement
    twice more as warm-up, which triples a multi-second decode (the warm-up is done once, above)."""
    synchronize(device)
    start = time.perf_counter()
    result = fn()
    synchronize(device)
    return result, time.perf_counter() - start


def main(argv: list[str] | None = None) -> list[dict]:
    """Run the benchmark; returns its rows."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=str(TARGET_PATH))
    ap.add_argument("--draft", default=str(DRAFT_PATH))
    ap.add_argument("--dtype", default="bfloat16", help="both models' dtype")
    ap.add_argument("--batch_sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument(
        "--num_prompts", type=int, default=16, help="prompts per batch size (a multiple of each B)"
    )
    ap.add_argument(
        "--gammas",
        nargs="+",
        default=["0", "1", "2", "auto"],
        help="integers (0, plain decoding through the engine, always runs: a target alone), or auto (GammaPolicy)",
    )
    ap.add_argument("--max_new_tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--hf_draft_step",
        action="store_true",
        help="step a Llama draft through HF's forward (SpeculativeDecoder(lean_draft=False)), c timed so too",
    )
    ap.add_argument(
        "--hf_target_step",
        action="store_true",
        help="step a Llama target through HF's forward in the engine (SpeculativeDecoder(lean_target=False)), its "
        "passes timed so too",
    )
    ap.add_argument("--out", default="outputs/bench_batch", help="folder for results.json and speedup.png")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    gammas = list(dict.fromkeys(["0", *args.gammas]))  # gamma 0: the target alone through the engine
    dtype = getattr(torch, args.dtype)
    draft, target, tok = load_demo_pair(args.draft, args.target, dtype=dtype, draft_dtype=dtype)
    apply_draft_vocab(draft)  # as the engine does, before c is timed: a saved sub-vocabulary head
    use_weight_major_linears(target)  # a float32 CPU target's faster layout, for every method alike
    per_file = -(-args.num_prompts // len(list(WORKLOAD_DIR.glob("*_eval.json"))))
    records = [
        r for path in sorted(WORKLOAD_DIR.glob("*_eval.json")) for r in load_conversations(path)[:per_file]
    ]
    prompts = [encode_prompt(tok, user_query(r)) for r in records][: args.num_prompts]
    n = args.max_new_tokens
    hf = {"max_new_tokens": n, "min_new_tokens": n, "do_sample": False, "pad_token_id": tok.pad_token_id}
    target.generate(
        torch.tensor([prompts[0]]), **(hf | {"max_new_tokens": 4, "min_new_tokens": 4})
    )  # warm-up
    rows = []
    # gamma "auto": one policy for the whole run, as a server keeps one: what it learnt of alpha and of how alpha
    # differs between rows at one batch size carries over to the next
    policy = GammaPolicy(lean_draft=not args.hf_draft_step, lean_target=not args.hf_target_step)
    for b in args.batch_sizes:
        batches = [pad(prompts[i : i + b], tok.pad_token_id, "left") for i in range(0, len(prompts), b)]
        # timed as the engine runs: with a padding mask when B > 1 (see osd.spec.timing.step_time)
        timing = {"batch": b, "reps": 5, "rounds": 2, "padded": b > 1}
        target_timing = timing | {"lean": not args.hf_target_step}
        t_target = target_pass_time(target, **target_timing)
        c = (step_time if args.hf_draft_step else draft_step_time)(draft, **timing) / t_target
        decoders = {
            g: SpeculativeDecoder(
                draft,
                target,
                gamma=g if g == "auto" else int(g),
                policy=policy if g == "auto" else None,
                lean_draft=not args.hf_draft_step,
                lean_target=not args.hf_target_step,
            )
            for g in gammas
        }
        for decoder in decoders.values():
            if decoder.policy is not None:  # measured once per batch size, outside the timed runs
                decoder.policy.measure_costs(draft, target, b)
        # interleaved batch by batch, so that load on a shared machine falls on every method alike
        seconds: dict[str, list[float]] = {name: [] for name in ["HF generate", *decoders]}
        calls: dict[str, list[list]] = {g: [] for g in decoders}  # each batch's outputs
        for ids, m in batches:
            seconds["HF generate"].append(
                timed(lambda ids=ids, m=m: target.generate(ids, attention_mask=m, **hf), target.device)[1]
            )
            for g, decoder in decoders.items():
                batch_outs, s = timed(
                    lambda d=decoder, ids=ids, m=m: d.generate_batch(ids, m, max_new_tokens=n), target.device
                )
                calls[g].append(batch_outs)
                seconds[g].append(s)
        outs = {g: [o for batch_outs in calls[g] for o in batch_outs] for g in decoders}  # every row's output
        hf_base = len(prompts) * n / sum(seconds["HF generate"])
        engine_base = sum(o.generated_ids.shape[1] for o in outs["0"]) / sum(seconds["0"])
        alone = "HF generate" if hf_base >= engine_base else "0"  # the fastest target alone
        base = max(hf_base, engine_base)
        for gamma in decoders:
            tokens = sum(o.generated_ids.shape[1] for o in outs[gamma])
            proposed = sum(o.num_proposed for o in outs[gamma])
            steps = sum(len(o.accepted_lengths) for o in outs[gamma])
            alpha = pooled_alpha(sum(o.alpha_sum for o in outs[gamma]), proposed)  # None at gamma 0
            spec = tokens / sum(seconds[gamma])
            row = {"batch size": b, "gamma": gamma, "target alone tok/s": base, "HF generate tok/s": hf_base,
                   "spec tok/s": spec, "speedup": spec / base, "alpha": alpha, "proposed / step": proposed / steps,
                   "c": c,
                   # a query's latency is its batch's call (EOS ignored: every row ends with its batch)
                   "target latency p50 s": statistics.median(seconds[alone]),
                   "spec latency p50 s": statistics.median(seconds[gamma]),
                   "spec latency max s": max(seconds[gamma]), **step_split(calls[gamma])}  # fmt: skip
            # Eq. 2 charged with the verify cost of B x (gamma + 1) tokens over B x 1, for a fixed gamma that
            # proposed (gamma 0 has no alpha)
            if gamma != "auto" and alpha is not None:
                g = int(gamma)
                v = target_pass_time(target, length=g + 1, **target_timing) / t_target
                predicted = speedup_measured_verify(alpha, g, c, v)
                row |= {
                    "verify cost": v,
                    "Eq. 2 (verify)": predicted,
                    "measured / Eq. 2": row["speedup"] / predicted,
                }
            rows.append(row)
            print({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
    header = list(dict.fromkeys(k for r in rows for k in r))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    paying = stops_paying(rows)
    print("speculation stops paying from batch size:", paying, flush=True)
    save_results(
        out,
        {"args": vars(args), "rows": rows, "stops paying from batch size": paying},
        markdown_table(rows, header),
        "benchmarks.bench_batch",
        argv,
    )
    plot(rows, out / "speedup.png")
    return rows


def step_split(calls: list[list]) -> dict[str, float]:
    """Where a method's batches spent their steps (each row's timings are its batch's): target passes per batch
    (its slowest row's) and per row, and seconds drafting, in the target's passes, and the rest (accepting,
    committing, the caches), summed over the batches."""
    firsts = [outs[0] for outs in calls]
    return {
        "batch steps": statistics.mean(max(o.num_target_calls for o in outs) for outs in calls),
        "row steps": statistics.mean(o.num_target_calls for outs in calls for o in outs),
        "draft s": sum(o.draft_time_s for o in firsts),
        "target s": sum(o.target_time_s for o in firsts),
        "accept and caches s": sum(o.accept_time_s + o.cache_time_s for o in firsts),
    }


def stops_paying(rows: list[dict]) -> dict[str, int | None]:
    """Per gamma, the smallest batch size from which it is slower than the target alone (None: never)."""
    paying = {}
    for gamma in dict.fromkeys(r["gamma"] for r in rows):
        by_batch = sorted((r["batch size"], r["speedup"]) for r in rows if r["gamma"] == gamma)
        slower = [b for i, (b, _) in enumerate(by_batch) if all(x < 1.0 for _, x in by_batch[i:])]
        paying[gamma] = slower[0] if slower else None
    return paying


def plot(rows: list[dict], path: Path) -> None:
    """Speedup over the fastest target alone against batch size, one line per gamma."""
    import matplotlib.pyplot as plt

    from osd.plots import save_figure  # it selects matplotlib's file-only backend

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for gamma in dict.fromkeys(r["gamma"] for r in rows):
        picked = [r for r in rows if r["gamma"] == gamma]
        ax.plot(
            [r["batch size"] for r in picked],
            [r["speedup"] for r in picked],
            marker="o",
            label=f"gamma {gamma}",
        )
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set(xscale="log", xlabel="batch size", ylabel="speedup over the target alone")
    ax.set_xticks(
        sorted({r["batch size"] for r in rows}),
        labels=[str(b) for b in sorted({r["batch size"] for r in rows})],
    )
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks.bench_batch"))
