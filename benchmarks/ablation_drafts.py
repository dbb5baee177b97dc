r"""Drafts of increasing size for the draft-size ablation (`benchmarks/ablations.py draft_size`).

Each draft is built exactly as the demo draft (`osd.demo.build_draft`: distilled from the target's
top-K on the general corpus, with a sub-vocabulary head) with its own depth and width and the same
short budget (--steps x --batch_size examples, same seed and data order). (`benchmarks/results/ablations/v1` was
recorded with the recipe before that one, pre-training on the workload's plain documents and the
Python manual's prose: `git show 1cda991:osd/demo/build_draft.py`.) Then each is distilled online (`osd.train --mode online` through
`osd.distill.demo_runs.run_online`) on the same stream: the first --queries training queries
of --domain, an update every --online_update_interval queries (the online recipe's flags:
`osd.online.config.add_online_flags`), same learning rate. Training only (no timing): it may share
the machine with one other 1-thread job.

    python -m benchmarks.ablation_drafts --sizes 1x128 2x256 4x512 --steps 200 --batch_size 8 \
        --domain finance --queries 32 --work outputs/ablations/drafts \
        --out benchmarks/results/ablations/v1

writes `{work}/{size}/standard` (pretrained), `{work}/{size}/online` (online-distilled) and
`{out}/parts/draft_training.json` (the command, parameters, losses, seconds, stream alpha).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from osd.demo.build_draft import DraftBuildConfig, build
from osd.distill.demo_runs import BENCHMARK_PRESET, alpha_over, run_online
from osd.online.config import add_online_flags, online_arguments
from osd.results import write_part
from osd.spec.gamma import STANDARD_TIMING, add_gamma_flag
from osd.streams import load_sources
from osd.user_errors import run_main


def parse_size(size: str) -> tuple[int, int]:
    """'LxH' -> (layers, hidden); raises naming the flag on a malformed size."""
    try:
        layers, hidden = (int(x) for x in size.lower().split("x"))
    except ValueError:
        raise ValueError(f"--sizes {size!r}: expected LAYERSxHIDDEN, e.g. 2x256") from None
    if layers < 1 or hidden < 64 or hidden % 64:
        raise ValueError(f"--sizes {size!r}: need >= 1 layer and a hidden size that is a multiple of 64")
    return layers, hidden


def build_size(size: str, out_dir: Path, steps: int, batch_size: int, lr: float) -> dict:
    """Pre-train one draft of `size` with the demo draft's recipe (MLP 4 x hidden, 64-wide heads)."""
    layers, hidden = parse_size(size)
    cfg = DraftBuildConfig(
        out_dir=str(out_dir), layers=layers, hidden=hidden, ffn=4 * hidden, heads=hidden // 64,
        steps=steps, batch_size=batch_size, lr=lr, warmup_steps=max(1, steps // 10),
    )  # fmt: skip
    metrics = build(cfg)
    return {k: metrics[k] for k in ("parameters", "final_train_loss", "train_tokens")} | {
        "train_seconds": metrics["train_seconds_this_run"]
    }


def train_drafts(args: argparse.Namespace) -> dict:
    """Build, then distil online, every size; returns the training record (per size)."""
    stream = load_sources([args.domain])[args.domain][: args.queries]
    record = {"domain": args.domain, "queries": len(stream), "sizes": {}}
    for size in args.sizes:
        work = Path(args.work) / size
        row = build_size(size, work / "standard", args.steps, args.batch_size, args.lr)
        start = time.time()
        entries = run_online(
            work / "online", stream, online_arguments(args), student=work / "standard",
            learning_rate=args.online_lr, max_new_tokens=args.max_new_tokens, gamma=args.gamma,
        )  # fmt: skip
        half = len(stream) // 2
        row |= {
            "online_seconds": time.time() - start,
            "online_updates": entries[-1]["online_updates"],
            "stream_alpha_first_half": alpha_over(entries, 0, half),
            "stream_alpha_second_half": alpha_over(entries, half, len(stream)),
        }
        record["sizes"][size] = row
        print(f"[drafts] {size}: {row}", flush=True)
    return record


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=["1x128", "2x256", "4x512"], help="LAYERSxHIDDEN each")
    ap.add_argument("--steps", type=int, default=200, help="pre-training steps, the same for every size")
    ap.add_argument("--batch_size", type=int, default=8, help="sequences of 256 tokens per step")
    ap.add_argument("--lr", type=float, default=2e-3, help="peak pre-training learning rate")
    ap.add_argument("--domain", default="finance", help="the online stream's workload domain")
    ap.add_argument("--queries", type=int, default=32, help="online stream length (training queries)")
    add_online_flags(ap, BENCHMARK_PRESET)
    ap.add_argument("--online_lr", type=float, default=1e-3)
    add_gamma_flag(ap, STANDARD_TIMING, "while serving the stream")
    ap.add_argument("--max_new_tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--work", default="outputs/ablations/drafts", help="folder for the drafts")
    ap.add_argument(
        "--out", default="outputs/ablations", help="results folder (writes parts/draft_training.json)"
    )
    return ap


def main(argv: list[str] | None = None) -> dict:
    args = parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    record = train_drafts(args)
    write_part(Path(args.out), "draft_training", "benchmarks.ablation_drafts", argv, record)
    return record


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks.ablation_drafts"))
