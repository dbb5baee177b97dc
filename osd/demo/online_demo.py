"""The main job: online speculative decoding on the embedded default; the draft learns the stream it serves.

    python -m osd.demo.online_demo
    python -m osd.demo.online_demo --per_domain 150 --ceiling none --output_dir outputs/online_demo_long
    python -m osd.demo.online_demo --device cuda       # on a GPU: the target (bf16), the draft and its updates there
    python -m osd.demo.online_demo --drafter head --head_path HEAD --output_dir outputs/online_demo_head

A stream of local-workload queries shifts abruptly from one domain to the next (--per_domain each, in
--domains order). `osd.train --mode online`'s trainer serves it through the one online loop
(osd.online) with the preset `PRESET`: speculative decoding with the demo draft and the target
(SmolLM2-135M-Instruct, greedy); after each query the draft takes four AdamW steps (lr 1e-4) on
every token of that query and of the one before it, in the background while a bf16 copy serves the
next query (on the CPU in a forked process, `osd.online.update_process`, so that serving never waits
for the update's Python). The recipe was chosen by replaying recipes over a recording of this stream
(`osd.analysis.online_replay`; benchmarks/results/online_demo/v11_update_process): revisiting the
previous query lifts sql's and math's alpha, and the update process makes its work cheap for serving.

At start-up it measures this machine (osd.spec.serving_choice, about 20 s): the target's step and its
passes over a few tokens in each dtype and layout on offer, and the draft's step. Speculative decoding
serves the target as Eq. 2 predicts fastest at --expected_alpha, Standard SD at that gamma; the online
draft, whose alpha climbs through each domain and falls at the next, takes its gamma step by step
(adaptive gamma, osd.spec.adaptive, starting from these measurements). Every speedup is over the fastest
target-alone configuration; --dtype and --linears force a choice, --gamma a fixed gamma for both drafts
(the paper's setting; an EAGLE-3 head always serves at a fixed gamma).

The report (osd.demo.report), on the last --tail queries of each domain: alpha of Standard SD (the
untouched draft), of the online draft and of a recorded offline ceiling (--ceiling); tokens/s of the
target alone, Standard SD and online SD. Outputs in --output_dir: alpha.png, summary.json, metrics.jsonl,
the final draft, and the draft after each domain's block (drafts/<domain>). --report_to wandb logs the
run (offline without an API key) for `python -m osd.dashboard`.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

if __name__ == "__main__":  # the main job's process, before torch's first allocation (as osd.train)
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

import torch
from transformers import PrinterCallback

from osd.conversations import save_conversations
from osd.datafiles import claim_output_dir, refuse_overwrite
from osd.demo import report
from osd.demo.target import TARGET_NAME
from osd.distill.callbacks import StreamProgress, finish_wandb_run, setup_wandb
from osd.distill.config import DistillTrainingArguments
from osd.distill.data import ConversationDataset
from osd.distill.experiment import build_trainer
from osd.distill.run_dir import LOCK_FILE, lock_run_dir
from osd.distill.subvocab import has_tied_draft_vocab
from osd.model_checks import check_same_tokenizer
from osd.models import load_head_drafter, load_model, load_tokenizer
from osd.online.config import OnlineArguments, add_online_flags, online_arguments
from osd.online.records import QueryStats, tail_length
from osd.paths import DOMAINS, DRAFT_PATH, REPO_ROOT, TARGET_PATH, WORKLOAD_DIR, repo_relative
from osd.results import command_line
from osd.spec import SpeculativeDecoder
from osd.spec.draft_vocab import apply_draft_vocab
from osd.spec.drafter import Drafter
from osd.spec.gamma import AUTO as ADAPTIVE
from osd.spec.gamma import NEEDS_PROPOSALS, Gamma, add_gamma_flag
from osd.spec.lean_llama import prompt_sizes
from osd.spec.serving_choice import (
    AUTO,
    DTYPES,
    LAYOUTS,
    Choice,
    available_layouts,
    measure_and_choose,
    retype_draft,
)
from osd.spec.timing import machine
from osd.streams import abrupt_stream
from osd.user_errors import non_negative_float, non_negative_int, run_main

ADAPTIVE_BY_DEFAULT = (
    "without --gamma the online draft's gamma is adaptive (Standard SD's is chosen at start-up)"
)
CEILING_PATH = REPO_ROOT / "benchmarks" / "results" / "online_demo" / "ceiling"  # one file per gamma
PRESET = OnlineArguments(
    online_eval_interval=1, online_steps_per_update=4, online_replay_queries=1, online_loss_positions="all",
    online_background_update=True, online_update_process=True, draft_serving_dtype="bfloat16",
)  # fmt: skip
OUTPUTS = ("alpha.png", "summary.json", "metrics.jsonl", "stream.json", "draft", "drafts", "head")
LEARNING_RATE = 1e-4  # the draft model's, with PRESET's steps
HEAD_LEARNING_RATE = 1e-4  # chosen by replay (benchmarks/results/standard_head/v2)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--domains", nargs="+", default=list(DOMAINS), help="stream order of the domains")
    add("--per_domain", type=int, default=45, help="queries per domain segment")
    add("--stream", choices=["abrupt", "mix"], default="abrupt",
        help="abrupt: one segment per domain, in --domains order; mix: the same queries interleaved at random")  # fmt: skip
    add(
        "--tail",
        type=int,
        default=None,
        help="queries at the end of each segment in the tables (default: a third)",
    )
    add("--ceiling", default=str(CEILING_PATH),
        help="osd.analysis.online_replay --offline_steps result recorded on this stream, draft and gamma, or a folder "
        "of them, the first that matches drawn ('none': no line)")  # fmt: skip
    add_online_flags(parser, PRESET)
    add("--learning_rate", type=non_negative_float, default=LEARNING_RATE)
    add("--compare_head", default=None, metavar="HEAD",
        help="also serve the same stream with this EAGLE-3 head (a speculators-format folder, osd.spec.eagle3) in "
        "the draft model's place, after it, on the same start-up choice: its tables, costs and plot beside the "
        "draft model's, its outputs in --output_dir/head")  # fmt: skip
    add("--head_learning_rate", type=non_negative_float, default=HEAD_LEARNING_RATE,
        help="--compare_head: the head's online learning rate")  # fmt: skip
    add("--head_replay_queries", type=non_negative_int, default=None,
        help="--compare_head: the head's --online_replay_queries (default: the draft model's); 4 lifts its alpha "
        "and costs each update 5 queries' work")  # fmt: skip
    add("--head_ceiling", default="none",
        help="--compare_head: the head's offline ceiling, as --ceiling (online_replay --drafter head --offline_steps)")  # fmt: skip
    add("--kl_method", default="forward")
    add("--draft_vocab_rows_only", action=argparse.BooleanOptionalAction, default=True,
        help="of the draft's tied embedding, train only the rows its sub-vocabulary head scores")  # fmt: skip
    add(
        "--freeze_embeddings",
        action="store_true",
        help="in place of --draft_vocab_rows_only: only the layers learn",
    )
    add_gamma_flag(parser, None, "None: Standard SD at the start-up choice's, online SD adaptive; N: both at N",
                   plain_decoding=NEEDS_PROPOSALS, auto=ADAPTIVE_BY_DEFAULT)  # fmt: skip
    add("--max_gamma", type=int, default=5, help="the largest gamma the start-up choice considers")
    add("--expected_alpha", type=float, default=0.4,
        help="the Standard draft's expected alpha: the start-up choice maximises Eq. 2 there; the online draft's "
        "adaptive gamma starts from it")  # fmt: skip
    add("--max_new_tokens", type=int, default=32)
    add("--target", default=str(TARGET_PATH), help="target (teacher): hub name or path")
    add("--draft", default=str(DRAFT_PATH), help="draft (student) to start from")
    add("--dtype", default=AUTO, choices=[AUTO, *DTYPES], help="the target's dtype for speculative decoding")
    add(
        "--linears",
        default=AUTO,
        choices=[AUTO, *LAYOUTS],
        help="the layout of the target's linear layers for speculative decoding (osd.spec.serving_choice)",
    )
    add("--device", default="cpu", choices=["cpu", "cuda"],
        help="where the target, the draft and its updates run (cuda: the first GPU, the target in bf16)")  # fmt: skip
    add("--output_dir", default="outputs/online_demo")
    add("--threads", type=int, default=1, help="torch CPU threads")
    add("--report_to", nargs="+", default=["none"], help="e.g. wandb (offline without an API key)")
    add("--run_name", help="the wandb run's name (default: built from the models and stream); "
        "with --compare_head the head's run is named with -head added")  # fmt: skip
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device on this machine")
    try:
        available_layouts(args.dtype, args.linears, args.device)
    except ValueError as e:
        parser.error(str(e))
    if not 0 < args.expected_alpha < 1 or args.max_gamma < 1:
        parser.error(f"--expected_alpha must lie in (0, 1) and --max_gamma be >= 1, got {args.expected_alpha}, {args.max_gamma}")  # fmt: skip
    for flag in ("ceiling", "head_ceiling"):
        if getattr(args, flag) != "none" and not Path(getattr(args, flag)).exists():
            parser.error(f"--{flag} {getattr(args, flag)}: no such file or folder ('none': no ceiling line)")
    if args.compare_head and args.drafter != "model":
        parser.error("--compare_head serves a head beside the draft model: leave --drafter at 'model'")
    args.tail = args.tail or tail_length(args.per_domain)
    return args


def load_drafts(args: argparse.Namespace, online: OnlineArguments, tokenizer) -> tuple[Drafter, Drafter]:
    """(the drafter that learns, in float32; an untouched copy in --draft_serving_dtype, which serves Standard SD):
    the draft model, or with --drafter head an EAGLE-3 head over the target (--head_path, or a fresh one)."""
    dtype = online.draft_serving_dtype or "float32"
    if online.drafter == "head":
        head = load_head_drafter(load_model(args.target, None, None), online.head_path)
        return head, copy.deepcopy(head).to(getattr(torch, dtype)).eval()
    check_same_tokenizer(args.draft, args.target, tokenizer)
    return load_model(args.draft, "float32", None), load_model(args.draft, dtype, None).eval()


def main(argv: list[str] | None = None) -> dict:
    """The main job in --output_dir, which it holds locked while it runs (a second run there is refused)."""
    args = parse_args(argv)
    inputs = {"--target": args.target, "--draft": args.draft, "workload": WORKLOAD_DIR}
    refuse_overwrite({"--output_dir": args.output_dir}, inputs)
    with lock_run_dir(args.output_dir):
        out = claim_output_dir(args.output_dir, "osd.demo.online_demo", OUTPUTS, inputs, ignore=(LOCK_FILE,))
        return run(args, out, sys.argv[1:] if argv is None else argv)


@dataclass
class DrafterRun:
    """One drafter's pass over the stream: what the report reads."""

    queries: list[QueryStats]  # per query served online, in stream order
    rows: list[dict]  # `report.TailServing.rows`, per domain
    costs: dict[str, float | None]  # `report.machine_costs`
    updates: int
    shares: dict[str, float]  # update time on the serving path and in the background, over serving time
    plot: Path
    gammas: dict[str, Gamma]  # Standard SD's and online SD's ("auto": adaptive)


def serve_online(
    args: argparse.Namespace, online: OnlineArguments, out: Path, learning_rate: float, models: tuple,
    ceiling_path: str, choice: Choice, stream: list[dict], dataset: ConversationDataset, prompt_tokens: int,
    reused_tokens: int, run_name: str | None = None,
) -> DrafterRun:  # fmt: skip
    """Serve the stream online with one drafter (models: the drafter that learns, its untouched serving copy, the
    served target, the target as it decodes fastest alone, the tokenizer), and its Standard SD and the target alone
    on each domain's tail as soon as the stream has served it (`report.TailServing`), as `choice`
    (the start-up measurement) serves them: Standard SD at its gamma, online SD at adaptive gamma from its
    measurements unless --gamma is given or a head drafts (then at that gamma too).
    The tables' ceiling is read from `ceiling_path`; its draft, block drafts and metrics go in `out`, its wandb run
    (if reported) is named `run_name` (default: built from the models and stream)."""
    draft, standard, teacher, baseline, tokenizer = models
    adaptive = args.gamma is None and online.drafter == "model"
    gammas: dict[str, Gamma] = {"standard": choice.gamma, "online": ADAPTIVE if adaptive else choice.gamma}
    for model in (draft, standard):  # the drafts' bf16 serving copies alike
        retype_draft(model, choice.layout)
    rows_only = (online.drafter == "model" and args.draft_vocab_rows_only and not args.freeze_embeddings
                 and has_tied_draft_vocab(draft))  # fmt: skip
    training_args = DistillTrainingArguments(
        output_dir=str(out), mode="online", per_device_train_batch_size=1, num_train_epochs=1,
        learning_rate=learning_rate, optim="adamw_torch_fused", lr_scheduler_type="constant", weight_decay=0.0,
        max_grad_norm=0.0, kl_method=args.kl_method, max_propose_num=gammas["online"], max_new_tokens=args.max_new_tokens,
        freeze_embeddings=args.freeze_embeddings, draft_vocab_rows_only=rows_only, eval_on_start=False,
        save_strategy="no", logging_steps=10**9, report_to=args.report_to, run_name=run_name, use_cpu=args.device == "cpu",
        disable_tqdm=True, seed=0, **vars(online),
    )  # fmt: skip
    blocks = out / "drafts" if args.stream == "abrupt" else None
    drafter_path = args.draft if online.drafter == "model" else online.head_path  # None: a fresh head
    run_info = {"student_model_path": drafter_path,
                "teacher_model_path": args.target,
                "data_path": str(Path(args.output_dir).resolve() / "stream.json"),  # both drafters' stream
                "stream": f"{args.stream}-{'-'.join(args.domains)}-x{args.per_domain}"}  # fmt: skip
    decoder = SpeculativeDecoder(standard, teacher, gamma=gammas["standard"])
    tails = report.TailServing(stream, dataset, decoder, baseline, tokenizer.eos_token_id, args)
    progress = StreamProgress(stream, blocks, lag=int(online.online_background_update))
    trainer = build_trainer(training_args, draft, teacher, tokenizer, dataset, run_info=repo_relative(run_info),
                            callbacks=[progress, tails], gamma_policy=choice.gamma_policy() if adaptive else None)  # fmt: skip
    trainer.remove_callback(PrinterCallback)  # the progress bar shows alpha; no dict per query
    trainer.train()
    trainer.save_model(str(out / "draft"))
    state = trainer.loop.state  # the run's records: one QueryStats per query served

    rows = tails.rows(state.queries)
    # the ceiling recorded at the start-up choice's gamma (Standard SD's; online SD's unless adaptive)
    ceiling = (
        report.recorded_ceiling(ceiling_path, stream, args, drafter_path, choice.gamma)
        if drafter_path
        else None
    )
    for r in rows if ceiling else ():
        r["ceiling"] = ceiling[r["domain"]]
    costs = report.machine_costs(
        standard, teacher, baseline, gammas, prompt_tokens, reused_tokens, rows, choice.max_gamma
    )
    name = TARGET_NAME if Path(args.target) == TARGET_PATH else Path(args.target).name
    png = report.plot_run(
        state.queries, rows, stream, out / "alpha.png", name, args, online.online_update_interval
    )
    shares = {"update_time_share": state.update_time_s / state.serve_time_s,
              "background_update_share": state.background_update_time_s / state.serve_time_s}  # fmt: skip
    return DrafterRun(state.queries, rows, costs, state.updates, shares, png, gammas)


def run(args: argparse.Namespace, out: Path, argv: list[str]) -> dict:
    start = time.perf_counter()
    online = online_arguments(args, online_alpha_window=args.tail)
    # CUDA cannot be forked: there the update runs in the worker thread (GPU ops hold the GIL briefly)
    if args.device != "cpu":
        online = replace(online, online_update_process=False)
    setup_wandb(args.report_to)
    torch.set_num_threads(args.threads)
    sources = {d: json.loads((Path(WORKLOAD_DIR) / f"{d}_train.json").read_text()) for d in args.domains}
    stream = abrupt_stream(sources, [args.per_domain] * len(sources))
    if args.stream == "mix":  # the same queries, shuffled: a draft distilled on every domain at once
        random.Random(0).shuffle(stream)
    save_conversations(stream, out / "stream.json")

    tokenizer = load_tokenizer(args.target, None)
    draft, standard = load_drafts(args, online, tokenizer)
    standard = standard.to(args.device)  # the Trainer moves `draft`
    dataset = ConversationDataset(out / "stream.json", tokenizer, model_max_length=512)
    # a mean prompt, and its leading tokens the caches take from the prompt before (a system prompt, a template)
    prompt_tokens, reused_tokens = prompt_sizes([dataset[i]["prompt_ids"] for i in range(len(dataset))])
    choice, targets = measure_and_choose(
        load_model(args.target, None, None).eval(), apply_draft_vocab(standard), args.expected_alpha,
        args.max_gamma, prompt_tokens, args.max_new_tokens, args.dtype, args.linears, args.gamma, args.device,
        reused_tokens,
    )  # fmt: skip
    online_gamma = f"gamma {args.gamma}" if args.gamma is not None else "adaptive gamma from these costs"
    print("\n".join(["serving configuration, measured at start-up:", *choice.lines(),
                     f"online SD (a draft model): {online_gamma}"]), flush=True)  # fmt: skip
    teacher, baseline = targets[choice.layout], targets[choice.baseline]
    common = (choice, stream, dataset, prompt_tokens, reused_tokens)
    models = (draft, standard, teacher, baseline, tokenizer)
    main_run = serve_online(args, online, out, args.learning_rate, models, args.ceiling, *common,
                            run_name=args.run_name)  # fmt: skip
    head_run = None
    if args.compare_head:  # the same stream, machine and choice, with the head in the draft model's place
        replay = (
            online.online_replay_queries if args.head_replay_queries is None else args.head_replay_queries
        )
        head_online = replace(
            online, drafter="head", head_path=args.compare_head, online_replay_queries=replay
        )
        head, head_standard = load_drafts(args, head_online, tokenizer)
        models = (head, head_standard.to(args.device), teacher, baseline, tokenizer)
        finish_wandb_run()  # the head's metrics in a run of its own
        head_run = serve_online(args, head_online, out / "head", args.head_learning_rate, models, args.head_ceiling,
                                *common, run_name=args.run_name and f"{args.run_name}-head")  # fmt: skip

    summary = {"command": command_line("osd.demo.online_demo", argv), "machine": machine(args.device), **run_summary(main_run),
               "wall_s": time.perf_counter() - start, "args": vars(args), "serving": choice.summary()}  # fmt: skip
    if head_run is not None:
        summary["head"] = {"head_path": args.compare_head, **run_summary(head_run)}
    (out / "summary.json").write_text(json.dumps(repo_relative(summary), indent=1))
    drafter = "draft model" if online.drafter == "model" else "EAGLE-3 head"
    for label, result in ((drafter, main_run), ("EAGLE-3 head", head_run)):
        if result is None:
            continue
        print(f"\n=== {label}{' (--compare_head, the same stream)' if result is head_run else ''} ===")
        report.print_tables(result.rows, result.gammas)
        report.print_costs(result.costs, summary["machine"], result.gammas, choice.layout, choice.baseline)
        print(f"update time / serving time: {result.shares['update_time_share']:.3f} on the serving path, "
              f"{result.shares['background_update_share']:.3f} in the background ({result.updates} updates)")  # fmt: skip
        print(f"plot: {result.plot}")
    if head_run is not None:
        print("\nside by side, all domains' tails, speedup over the target alone (Standard SD, online SD): "
              + "; ".join(f"{label} {report.speedups(result.rows)}"
                          for label, result in ((drafter, main_run), ("EAGLE-3 head", head_run))))  # fmt: skip
    return summary


def run_summary(result: DrafterRun) -> dict:
    """A drafter's pass as summary.json keeps it."""
    return {"costs": result.costs, "domains": result.rows, "plot": str(result.plot), "updates": result.updates,
            "gammas": result.gammas, **result.shares}  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(run_main(main, "osd.demo.online_demo"))
