"""Draft architecture profile (Decoding Speculative Decoding, Sec. 4): depth x width grid of drafts.

Each draft is the target's architecture (Llama family) with its vocabulary and tokenizer, cut to
`depth` layers of `width` hidden units (width / head_dim heads, the target's MLP ratio and GQA
ratio), randomly initialised: latency does not depend on the weights. For each, in the target's
dtype: a cached one-token step after --context tokens (`osd.spec.timing.step_time`; every model
timed --repeats times, interleaved, the fastest kept), c = draft step / target step, and Eq. 2 (`osd.cost_model`) at the best gamma for an acceptance rate alpha.
alpha is --alpha for every draft (the same acceptance isolates latency, DSD's question), or, with
--train_steps N, each draft distilled from the target N steps by `osd.train --mode offline`
(same data, batch, learning rate and seed for all: the demo workload's training queries, sample
source teacher, i.e. their reference answers scored by the target, forward KL) and its greedy alpha
replayed (`osd.analysis.simulate`) against one recording of the target on --eval_prompts eval queries.

Writes {out}/results.json (with the command), table.md and profile.png (step latency against
width, one line per depth; Eq. 2 throughput against parameters).

    python benchmarks/draft_profile.py --depths 2 8 --widths 256 512 1024 --out benchmarks/results/draft_profile/v1
    python benchmarks/draft_profile.py --depths 1 2 --widths 256 512 --train_steps 200 --eval_prompts 8
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel  # noqa: E402

from osd.analysis.analyze import summarize  # noqa: E402
from osd.analysis.record import record_conversations  # noqa: E402
from osd.analysis.recording import Recording, tokenizer_identity  # noqa: E402
from osd.analysis.simulate import simulate, write_outputs  # noqa: E402
from osd.conversations import load_conversations, save_conversations  # noqa: E402
from osd.cost_model import best_gamma, speedup  # noqa: E402
from osd.distill.config import DataArguments, DistillTrainingArguments, ModelArguments  # noqa: E402
from osd.distill.experiment import run as run_experiment  # noqa: E402
from osd.distill.lm_training import num_params  # noqa: E402
from osd.paths import DOMAINS, TARGET_PATH, repo_relative, workload_path  # noqa: E402
from osd.plots import save_figure  # noqa: E402
from osd.spec.draft_vocab import set_draft_vocab  # noqa: E402
from osd.spec.gamma import DEMO, NEEDS_PROPOSALS, NO_POLICY, add_gamma_flag
from osd.spec.timing import machine, step_time  # noqa: E402
from osd.user_errors import run_main


def make_draft(target: PreTrainedModel, depth: int, width: int) -> PreTrainedModel:
    """A random float32 draft: the target's config at `depth` layers and `width` hidden units."""
    cfg = copy.deepcopy(target.config)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    if width % head_dim:
        raise ValueError(f"--widths {width}: not a multiple of the target's head_dim {head_dim}")
    heads, group = width // head_dim, cfg.num_attention_heads // cfg.num_key_value_heads
    cfg.num_hidden_layers, cfg.hidden_size, cfg.head_dim = depth, width, head_dim
    cfg.num_attention_heads, cfg.num_key_value_heads = heads, heads // group if heads % group == 0 else heads
    cfg.intermediate_size = round(width * target.config.intermediate_size / target.config.hidden_size)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()


def distill_draft(
    draft: PreTrainedModel, tokenizer, args: argparse.Namespace, work: Path
) -> tuple[PreTrainedModel, dict]:
    """(the draft after --train_steps steps of `osd.train` offline distillation from --target, its
    training record); the same data, batch, learning rate and seed for every draft."""
    init, run, data = work / "init", work / "distill", work / "train.json"
    shutil.rmtree(work, ignore_errors=True)
    draft.save_pretrained(init)
    tokenizer.save_pretrained(init)
    save_conversations([r for d in DOMAINS for r in load_conversations(workload_path(d, "train"))], data)
    model_args = ModelArguments(
        student_model_path=str(init), teacher_model_path=args.target, teacher_dtype=args.dtype
    )
    data_args = DataArguments(data_path=str(data), model_max_length=256)
    training_args = DistillTrainingArguments(
        output_dir=str(run), mode="offline", sample_source="teacher", kl_method="forward", max_steps=args.train_steps,
        per_device_train_batch_size=args.train_batch, learning_rate=args.lr, warmup_steps=max(1, args.train_steps // 10),
        eval_strategy="no", eval_on_start=False, save_strategy="no", report_to="none",
        logging_steps=max(1, args.train_steps // 10), use_cpu=True, disable_tqdm=True, seed=0,
    )  # fmt: skip
    start = time.time()
    run_experiment(model_args, data_args, training_args)
    state = json.loads((run / "trainer_state.json").read_text())
    losses = [e["loss"] for e in state["log_history"] if "loss" in e]
    record = {"distill_steps": state["global_step"], "distill_seconds": time.time() - start,
              "distill_first_loss": losses[0], "distill_last_loss": losses[-1]}  # fmt: skip
    return AutoModelForCausalLM.from_pretrained(run, dtype=torch.float32).eval(), record


def greedy_alpha(
    draft: PreTrainedModel, recording: Recording, identity: dict, gamma: int, out: Path
) -> float:
    """Dataset greedy alpha of `draft` replayed against `recording` (iterations kept under `out`)."""
    results = simulate(recording, draft, identity, gamma=gamma)
    jsonl = write_outputs(results, out, {})[0]
    return summarize(json.loads(line) for line in jsonl.read_text().splitlines())["dataset"]["alpha"]


def plot(rows: list[dict], target_ms: float, path: Path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for depth in sorted({r["depth"] for r in rows}):
        mine = sorted((r for r in rows if r["depth"] == depth), key=lambda r: r["width"])
        left.plot(
            [r["width"] for r in mine], [r["draft_step_ms"] for r in mine], "o-", label=f"{depth} layers"
        )
        right.plot(
            [r["params_m"] for r in mine],
            [r["eq2_tokens_per_s"] for r in mine],
            "o-",
            label=f"{depth} layers",
        )
    left.axhline(target_ms, ls="--", c="gray", label="target step")
    left.set(
        xlabel="draft width (hidden size)", ylabel="draft step (ms)", title="step latency: depth vs width"
    )
    left.set_yscale("log")
    right.set(
        xlabel="draft parameters (M)", ylabel="Eq. 2 tokens/s", title="predicted throughput (best gamma)"
    )
    for ax in (left, right):
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=str(TARGET_PATH))
    ap.add_argument("--dtype", default="bfloat16", help="target and drafts, for timing and replay")
    ap.add_argument("--depths", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--widths", type=int, nargs="+", default=[256, 512, 1024])
    ap.add_argument("--context", type=int, default=64, help="tokens in the KV cache when a step is timed")
    ap.add_argument("--alpha", type=float, default=0.6, help="alpha of every draft without --train_steps")
    ap.add_argument(
        "--train_steps", type=int, default=0, help="train each draft N steps and measure alpha (0: no)"
    )
    ap.add_argument("--train_batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--eval_prompts", type=int, default=8, help="sql eval queries the target is recorded on")
    add_gamma_flag(
        ap, DEMO, "of the replay that measures alpha", plain_decoding=NEEDS_PROPOSALS, auto=NO_POLICY
    )
    ap.add_argument(
        "--repeats", type=int, default=3, help="timings per model, interleaved; the fastest is kept"
    )
    ap.add_argument(
        "--draft_vocab_size", type=int, default=0,
        help="time the drafts with a sub-vocabulary head over this many tokens (osd.spec.draft_vocab; 0: full head)",
    )  # fmt: skip
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="outputs/draft_profile")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    out, dtype = Path(args.out), getattr(torch, args.dtype)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(args.target)
    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=dtype).eval()
    recording = None
    if args.train_steps:
        recording = record_conversations(
            args.target, workload_path("sql", "eval"), args.eval_prompts, args.dtype, max_new_tokens=64
        )
    rows, drafts = [], []
    for depth in args.depths:
        for width in args.widths:
            draft = make_draft(target, depth, width)
            row = {"depth": depth, "width": width, "params_m": num_params(draft) / 1e6}
            if args.train_steps:
                draft, trained = distill_draft(draft, tokenizer, args, out / f"distill_d{depth}_w{width}")
                row |= trained
            draft = draft.to(dtype)
            if args.draft_vocab_size:  # the head's cost does not depend on which rows it keeps
                set_draft_vocab(draft, range(args.draft_vocab_size))
            row["alpha"] = args.alpha
            if recording is not None:
                replay = out / f"replay_d{depth}_w{width}"
                row["alpha"] = greedy_alpha(
                    draft, recording, tokenizer_identity(tokenizer), args.gamma, replay
                )
            rows.append(row)
            drafts.append(draft)
    # every model timed --repeats times, interleaved, the fastest kept: load only ever adds time
    times = [[] for _ in range(len(drafts) + 1)]
    for repeat in range(args.repeats):
        for model, seconds in zip([target, *drafts], times, strict=True):
            seconds.append(step_time(model, args.context))
        print(f"timing round {repeat + 1}/{args.repeats}: target {times[0][-1] * 1e3:.2f} ms", flush=True)
    t_target = min(times[0])
    for row, seconds in zip(rows, times[1:], strict=True):
        row["draft_step_ms"], row["draft_step_ms_all"] = min(seconds) * 1e3, [t * 1e3 for t in seconds]
    for row in rows:
        row["c"] = row["draft_step_ms"] / 1e3 / t_target
        row["best_gamma"] = best_gamma(row["alpha"], row["c"])
        row["eq2_speedup"] = speedup(row["alpha"], row["best_gamma"], row["c"])
        row["eq2_tokens_per_s"] = row["eq2_speedup"] / t_target
    target_ms = t_target * 1e3
    record = {
        "command": " ".join(
            ["python benchmarks/draft_profile.py", *(sys.argv[1:] if argv is None else argv)]
        ),
        "target": os.path.abspath(args.target),
        "machine": machine(),
        "dtype": args.dtype,
        "threads": args.threads,
        "context": args.context,
        "draft_vocab_size": args.draft_vocab_size or None,
        "target_step_ms_all": [t * 1e3 for t in times[0]],
        "alpha_source": f"replayed greedy alpha after {args.train_steps} osd.train distillation steps"
        if args.train_steps
        else f"{args.alpha} for every draft, assumed (--alpha)",
        "rows": rows,
    }
    (out / "results.json").write_text(json.dumps(repo_relative(record), indent=1) + "\n")
    head = "| depth | width | params (M) | draft step (ms) | c | alpha | best gamma | Eq. 2 speedup | Eq. 2 tok/s |"
    lines = [f"target step {target_ms:.2f} ms (the fastest of {args.repeats} timings); alpha: {record['alpha_source']}", "", head,
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    lines += [
        f"| {r['depth']} | {r['width']} | {r['params_m']:.1f} | {r['draft_step_ms']:.2f} | {r['c']:.3f} | "
        f"{r['alpha']:.3f} | {r['best_gamma']} | {r['eq2_speedup']:.2f} | {r['eq2_tokens_per_s']:.1f} |"
        for r in rows
    ]
    (out / "table.md").write_text("\n".join(lines) + "\n")
    plot(rows, target_ms, out / "profile.png")
    print("\n".join(lines))
    return rows


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks.draft_profile"))
