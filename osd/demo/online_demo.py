"""Online speculative decoding on the embedded default: the draft learns the stream it serves.

    python -m osd.demo.online_demo                      # about 7 minutes on a 2-core CPU
    python -m osd.demo.online_demo --per_domain 150 --ceiling none --output_dir outputs/online_demo_long

A stream of queries from the local workload shifts abruptly from one domain to the next
(--per_domain queries each, in --domains order). Each query is served by speculative decoding
with the demo draft and the target, SmolLM2-135M-Instruct in bf16 (gamma = --max_propose_num, greedy);
every --online_update_interval queries the draft takes --steps_per_update distillation steps on the tokens
it served (every token by default, the ones it got wrong with --loss_positions wrong;
osd.distill.online, the same trainer as `python -m osd.train --mode online`). The default recipe
(gamma 3; lr 1e-4, four steps per query on every served token, no replay) was chosen by replaying
recipes over a recording of this stream (`osd.analysis.online_replay`; benchmarks/results/online_demo/);
the default stream (45 queries of 32 new tokens per domain) spends the serving budget of 30 x 48 on
longer blocks, where the draft has more queries to learn from (benchmarks/results/general_draft/LOG.md, 19).
The draft trains in float32 (AdamW's fused kernel: one pass over the weights and their moments, which
halves the update's time; of its tied embedding only the 8192 rows its head scores, --draft_vocab_rows_only,
which takes a third off again) and serves as a bf16 copy refreshed after each update; the update runs
in a worker thread on a second core while the next query is served (--no-background_update: on the
serving path), so each update serves from the query after next. A progress bar shows
alpha as it rises. At the end, on the last --tail queries of each domain segment, one table
compares alpha of Standard speculative decoding (the untouched draft) with the online draft as
it served them and, when one was recorded on this stream (--ceiling), with an offline-distilled
draft (the ceiling), and one compares latency: the target alone, Standard SD and the online draft
(tokens/s and speedup; the online figures are the engine's times while serving the stream, the
updates apart, whose share is printed too). A PNG plots alpha over the stream.
Outputs: {output_dir}/alpha.png, summary.json, metrics.jsonl, the final draft, and (abrupt streams) the
draft as it stood after each domain's block, drafts/<domain>. With --report_to wandb
the run also goes to wandb (offline without an API key), named after its models and stream unless
--run_name is given; `python -m osd.dashboard` builds the acceptance-rate dashboard for it.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import PrinterCallback, TrainerCallback

from osd.analysis.online_replay import tail_length
from osd.conversations import save_conversations
from osd.cost_model import speedup_measured_verify
from osd.datafiles import refuse_overwrite
from osd.demo.step_cost import cost_ratio
from osd.demo.target import TARGET_NAME
from osd.distill.callbacks import setup_wandb
from osd.distill.config import DistillTrainingArguments
from osd.distill.data import ConversationDataset
from osd.distill.experiment import build_trainer
from osd.distill.flags import add_update_interval_flag
from osd.distill.online import QueryStats, pooled_alpha
from osd.distill.subvocab import has_tied_draft_vocab
from osd.model_checks import check_same_tokenizer
from osd.models import SERVING_DTYPES, load_model, load_tokenizer
from osd.paths import DOMAINS, DRAFT_PATH, REPO_ROOT, TARGET_PATH, WORKLOAD_DIR, repo_relative
from osd.plots import alpha_series, dataset_bands, plot_alpha, read_log
from osd.spec import AcceptanceStats, SpeculativeDecoder
from osd.spec.evaluate import target_only_greedy
from osd.spec.gamma import DEMO, NEEDS_PROPOSALS, NO_POLICY, add_gamma_flag
from osd.spec.packed_linear import check_packed_dtype, use_packed_linears
from osd.spec.timing import machine, step_time
from osd.streams import abrupt_stream
from osd.user_errors import run_main

CEILING_PATH = REPO_ROOT / "benchmarks" / "results" / "online_demo" / "v3_45x32" / "ceiling.json"


class AlphaProgress(TrainerCallback):
    """A progress bar over the stream whose postfix shows the current domain and the windowed alpha."""

    def __init__(self, stream: list[dict]) -> None:
        self.stream, self.bar = stream, None

    def on_train_begin(self, args, state, control, **kwargs):
        self.bar = tqdm(total=len(self.stream), desc="serving + distilling", unit="query")

    def on_step_end(self, args, state, control, **kwargs):
        self.bar.update(1)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "alpha_window" in logs:
            domain = self.stream[min(state.global_step, len(self.stream)) - 1]["dataset"]
            self.bar.set_postfix(domain=domain, alpha=f"{logs['alpha_window']:.3f}")

    def on_train_end(self, args, state, control, **kwargs):
        self.bar.close()


class BlockDrafts(TrainerCallback):
    """Saves the draft as it stood once it had learned each domain block of an abrupt stream, to
    {folder}/<domain>: what a server held for that traffic (`bench_engine --data_drafts`)."""

    def __init__(self, stream: list[dict], folder: Path, background: bool) -> None:
        ends = [
            i
            for i, r in enumerate(stream)
            if i + 1 == len(stream) or stream[i + 1]["dataset"] != r["dataset"]
        ]
        # after step n the draft holds the updates on queries 0..n-1 (0..n-2 with background updates; the
        # stream's last update runs in its own step)
        lag = 1 if background else 0
        self.due = {min(i + 1 + lag, len(stream)): stream[i]["dataset"] for i in ends}
        self.folder = folder

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        domain = self.due.get(state.global_step)
        if domain is not None:
            model.save_pretrained(self.folder / domain)
            processing_class.save_pretrained(self.folder / domain)


@torch.inference_mode()
def serve_tail(decoder: SpeculativeDecoder, prompts: list[list[int]], max_new_tokens: int, eos: int) -> dict:
    """Serve prompts with `decoder` and with the target alone; alpha and (tokens, seconds) of each."""
    outs = [
        decoder.generate(torch.tensor([p]), max_new_tokens=max_new_tokens, eos_token_id=eos) for p in prompts
    ]
    baseline_tokens, baseline_s = 0, 0.0
    for p in prompts:
        start = time.perf_counter()
        baseline_tokens += len(target_only_greedy(decoder.target, torch.tensor([p]), max_new_tokens, eos))
        baseline_s += time.perf_counter() - start
    stats = AcceptanceStats.from_outputs(outs)
    return {"alpha": stats.alpha, "sd_tokens": stats.num_generated, "sd_s": stats.wall_time_s,
            "target_tokens": baseline_tokens, "target_s": baseline_s}  # fmt: skip


def online_on(queries: list[QueryStats], indices: list[int]) -> dict:
    """Token-weighted alpha and (tokens, seconds) of the online run over the queries at `indices`."""
    picked = [queries[i] for i in indices]
    return {"alpha": pooled_alpha(picked), "tokens": sum(q.num_generated for q in picked),
            "s": sum(q.wall_time_s for q in picked)}  # fmt: skip


def last_of_domain(stream: list[dict], domain: str, n: int) -> list[int]:
    """Stream indices of the last n queries of `domain` (the end of its segment in an abrupt stream)."""
    return [i for i, r in enumerate(stream) if r["dataset"] == domain][-n:]


def segment_lines(rows: list[dict]) -> dict[str, list[tuple[int, int, float]]]:
    """Dotted lines over each domain's compared queries: Standard SD and, when recorded, the ceiling."""

    def over(r: dict, alpha: float) -> tuple[int, int, float]:
        return r["queries"][0], r["queries"][-1] + 1, alpha

    lines = {"Standard (same queries)": [over(r, r["standard"]["alpha"]) for r in rows]}
    if all("ceiling" in r for r in rows):
        lines["offline-distilled ceiling (recorded run)"] = [over(r, r["ceiling"]) for r in rows]
    return lines


def print_tables(rows: list[dict], tail: int, gamma: int) -> None:
    print(f"\nlast {tail} queries of each domain in the stream (greedy, gamma {gamma}):")
    print(f"{'domain':<10} {'Standard alpha':>15} {'online alpha':>13} {'offline ceiling':>16}")
    for r in rows:
        ceiling = f"{r['ceiling']:.3f}" if "ceiling" in r else "-"
        print(
            f"{r['domain']:<10} {r['standard']['alpha']:>15.3f} {r['online']['alpha']:>13.3f} {ceiling:>16}"
        )
    print("\nlatency on the same queries, tokens/s (speedup over the target alone):")
    print(f"{'domain':<10} {'target only':>12} {'Standard SD':>18} {'online SD':>18}")
    for r in rows + [total_row(rows)]:
        base, std, onl = tokens_per_s(r)
        print(
            f"{r['domain']:<10} {base:>12.1f} {std:>10.1f} ({std / base:.2f}x) {onl:>10.1f} ({onl / base:.2f}x)"
        )


def tokens_per_s(row: dict) -> tuple[float, float, float]:
    """tokens/s of the target alone, Standard SD and online SD in one row of the tables (or `total_row`)."""
    std = row["standard"]
    return (
        std["target_tokens"] / std["target_s"],
        std["sd_tokens"] / std["sd_s"],
        row["online"]["tokens"] / row["online"]["s"],
    )


def total_row(rows: list[dict]) -> dict:
    """The domains' rows summed: the tables' "all" row."""

    def add(part: str, key: str) -> float:
        return sum(r[part][key] for r in rows)

    return {"domain": "all", "standard": {k: add("standard", k) for k in ("sd_tokens", "sd_s", "target_tokens", "target_s")},
            "online": {k: add("online", k) for k in ("tokens", "s")}}  # fmt: skip


def machine_costs(standard, target, gamma: int, context: int, rows: list[dict]) -> dict[str, float]:
    """This machine's costs, measured after serving (a few seconds): c (a draft step / a target step), the
    verification of gamma + 1 tokens in target steps, and Eq. 2 with them at the mean tail alphas."""
    c, _, step = cost_ratio(standard, target, context, reps=5, rounds=3)
    costs = {"c": c, "verify_cost": step_time(target, context, length=gamma + 1, reps=5, rounds=3) / step}
    for run in ("standard", "online"):
        alpha = sum(r[run]["alpha"] for r in rows) / len(rows)
        costs[f"eq2_{run}"] = speedup_measured_verify(alpha, gamma, costs["c"], costs["verify_cost"])
    return costs


def print_costs(costs: dict[str, float], info: dict, gamma: int, dtype: str) -> None:
    print(
        f"\nthis machine ({info['cpu']}, {info['cpu_capability']}, bf16 instructions: "
        f"{', '.join(info['cpu_bf16_instructions']) or 'none'}): verifying {gamma + 1} tokens costs "
        f"{costs['verify_cost']:.2f} target steps, a draft step {costs['c']:.3f} of one; Eq. 2 with these "
        f"costs predicts Standard SD {costs['eq2_standard']:.2f}x, online SD {costs['eq2_online']:.2f}x"
    )
    if costs["verify_cost"] > 1.5:
        print(
            "speculative decoding pays where a verification costs little more than one step (memory-bound "
            "decoding); here it is compute-bound, so it gains little or loses, whatever the draft's alpha"
        )
        if dtype == "bfloat16" and not info["cpu_bf16_instructions"]:
            print(
                "this CPU converts bf16 to float32 in every matmul; with --dtype float32 the engine verifies 4 "
                "tokens in about one float32 step (osd.spec.weight_major), though a float32 step reads twice "
                "the bytes of a bf16 one"
            )


def recorded_ceiling(path: str, stream: list[dict], args: argparse.Namespace) -> dict[str, float] | None:
    """Per-domain alpha of the offline-distilled ceiling from an `osd.analysis.online_replay
    --offline_steps` result, if it was recorded on this very stream, draft, gamma and answer length, over
    the tail the tables compare (the last third of each block); else None, with a note."""
    if path == "none" or not Path(path).is_file():
        return None
    recorded = json.loads(Path(path).read_text())
    same = {
        "stream": [q["id"] for q in recorded["queries"]["standard"]] == [r["id"] for r in stream],
        "draft": (REPO_ROOT / recorded["draft"]).resolve() == Path(args.draft).resolve(),
        "gamma": recorded.get("gamma") == args.gamma,
        "max_new_tokens": recorded.get("max_new_tokens") == args.max_new_tokens,
        "tail": args.tail == tail_length(args.per_domain),
    }
    if not all(same.values()) or "offline" not in recorded:
        differ = [k for k, v in same.items() if not v] or ["no offline run"]
        print(f"--ceiling {path}: recorded with another {', '.join(differ)}; the plot has no ceiling line")
        return None
    return recorded["offline"]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--domains", nargs="+", default=list(DOMAINS), help="stream order of the domains")
    parser.add_argument("--per_domain", type=int, default=45, help="queries per domain segment")
    parser.add_argument(
        "--stream", choices=["abrupt", "mix"], default="abrupt",
        help="abrupt: one segment per domain, in --domains order; mix: the same queries interleaved at random",
    )  # fmt: skip
    parser.add_argument(
        "--tail", type=int, default=None,
        help="queries at the end of each segment compared in the tables (default: the last third)",
    )  # fmt: skip
    parser.add_argument(
        "--ceiling", default=str(CEILING_PATH),
        help="osd.analysis.online_replay --offline_steps result recorded on this stream and draft: the offline-"
        "distilled ceiling drawn per domain ('none': no line)",
    )  # fmt: skip
    add_update_interval_flag(parser, 1)
    parser.add_argument(
        "--replay", type=int, default=0, help="--online_replay_queries: recent queries each update revisits"
    )
    parser.add_argument(
        "--steps_per_update",
        type=int,
        default=4,
        help="--online_steps_per_update: optimizer steps per update",
    )
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument(
        "--draft_vocab_rows_only", action=argparse.BooleanOptionalAction, default=True,
        help="--draft_vocab_rows_only: of the draft's tied embedding, train only the rows its sub-vocabulary head "
        "scores (a draft without such a head trains whole)",
    )  # fmt: skip
    parser.add_argument(
        "--freeze_embeddings", action="store_true",
        help="--freeze_embeddings, in place of --draft_vocab_rows_only: the draft's tied embedding and head stay "
        "as they are, only its layers learn (the worker is busy 0.14 of serving time instead of 0.18; math's "
        "tail alpha falls 0.03)",
    )  # fmt: skip
    parser.add_argument(
        "--background_update", action=argparse.BooleanOptionalAction, default=True,
        help="--online_background_update: the update runs on a second core while the next query is served",
    )  # fmt: skip
    parser.add_argument("--kl_method", default="forward")
    parser.add_argument(
        "--loss_positions", choices=["wrong", "all"], default="all",
        help="--online_loss_positions: distil where the draft was wrong (the paper) or on every served token",
    )  # fmt: skip
    add_gamma_flag(
        parser,
        DEMO,
        "osd.cost_model.best_gamma for this pair",
        plain_decoding=NEEDS_PROPOSALS,
        auto=NO_POLICY,
    )
    parser.add_argument("--max_new_tokens", type=int, default=32)
    parser.add_argument("--target", default=str(TARGET_PATH), help="target (teacher): hub name or path")
    parser.add_argument("--draft", default=str(DRAFT_PATH), help="draft (student) to start from")
    parser.add_argument(
        "--dtype", default="bfloat16", choices=SERVING_DTYPES,
        help="the target's dtype (float32 on a CPU without bf16 instructions verifies 4 tokens in ~1.1 steps)",
    )  # fmt: skip
    parser.add_argument(
        "--draft_dtype", default="bfloat16", choices=SERVING_DTYPES,
        help="the dtype the draft serves in (it trains in float32; a copy serves, refreshed after each update)",
    )  # fmt: skip
    parser.add_argument(
        "--packed_linears", action="store_true",
        help="bf16 on the CPU: the target, the Standard draft and the online draft's serving copy read oneDNN-"
        "packed weights (osd.spec.packed_linear): the target alone decodes about 1.6x faster, so the speedups over "
        "it are smaller",
    )  # fmt: skip
    parser.add_argument("--output_dir", default="outputs/online_demo")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument(
        "--report_to", nargs="+", default=["none"],
        help="TrainingArguments.report_to: e.g. wandb (offline without an API key; dashboard: osd.dashboard)",
    )  # fmt: skip
    parser.add_argument("--run_name", help="the wandb run's name (default: built from the models and stream)")
    args = parser.parse_args(argv)
    check_packed_dtype(parser, args)
    start = time.perf_counter()
    args.tail = args.tail or tail_length(args.per_domain)  # the part of a block the recorded ceiling reports
    setup_wandb(args.report_to)
    torch.set_num_threads(args.threads)
    out = Path(args.output_dir)
    refuse_overwrite(
        {"--output_dir": out}, {"--target": args.target, "--draft": args.draft, "workload": WORKLOAD_DIR}
    )
    shutil.rmtree(out, ignore_errors=True)  # a fresh run, not a resume of an older one
    out.mkdir(parents=True)

    sources = {d: json.loads((Path(WORKLOAD_DIR) / f"{d}_train.json").read_text()) for d in args.domains}
    stream = abrupt_stream(sources, [args.per_domain] * len(sources))
    if args.stream == "mix":  # the same queries, shuffled: a draft distilled on every domain at once
        random.Random(0).shuffle(stream)
    save_conversations(stream, out / "stream.json")

    tokenizer = load_tokenizer(args.target, None)
    check_same_tokenizer(args.draft, args.target, tokenizer)
    teacher = load_model(args.target, args.dtype, None).eval()
    draft = load_model(args.draft, "float32", None)
    standard = load_model(args.draft, args.draft_dtype, None).eval()  # untouched copy: the Standard baseline
    # every model alike, so the target-only baseline reads packed weights too
    packed = sum(use_packed_linears(m) for m in (teacher, draft, standard)) if args.packed_linears else 0
    dataset = ConversationDataset(out / "stream.json", tokenizer, model_max_length=512)
    training_args = DistillTrainingArguments(
        output_dir=str(out), mode="online", per_device_train_batch_size=1, num_train_epochs=1,
        learning_rate=args.learning_rate, optim="adamw_torch_fused", lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=0.0,
        kl_method=args.kl_method, online_loss_positions=args.loss_positions, max_propose_num=args.gamma, max_new_tokens=args.max_new_tokens,
        online_update_interval=args.update_interval, online_steps_per_update=args.steps_per_update, online_replay_queries=args.replay, freeze_embeddings=args.freeze_embeddings,
        draft_vocab_rows_only=args.draft_vocab_rows_only and not args.freeze_embeddings and has_tied_draft_vocab(draft),
        online_background_update=args.background_update, online_eval_interval=1, online_alpha_window=args.tail,
        draft_serving_dtype=args.draft_dtype, eval_on_start=False, save_strategy="no", logging_steps=10**9,
        report_to=args.report_to, run_name=args.run_name, use_cpu=True, disable_tqdm=True, seed=0,
    )  # fmt: skip
    trainer = build_trainer(
        training_args,
        draft,
        teacher,
        tokenizer,
        dataset,
        callbacks=[AlphaProgress(stream)]
        + ([BlockDrafts(stream, out / "drafts", args.background_update)] if args.stream == "abrupt" else []),
        run_info=repo_relative(
            {
                "student_model_path": args.draft,
                "teacher_model_path": args.target,
                "data_path": str(out.resolve() / "stream.json"),
                "stream": f"{args.stream}-{'-'.join(args.domains)}-x{args.per_domain}",
            }
        ),
    )
    trainer.remove_callback(PrinterCallback)  # the progress bar shows alpha; no dict per query
    trainer.train()
    trainer.save_model(str(out / "draft"))

    rows = []
    decoder = SpeculativeDecoder(standard, teacher, gamma=args.gamma)
    for domain in tqdm(args.domains, desc="Standard SD and the target alone on the same queries"):
        indices = last_of_domain(stream, domain, args.tail)
        prompts = [dataset[i]["prompt_ids"] for i in indices]
        rows.append({"domain": domain, "queries": indices,
                     "standard": serve_tail(decoder, prompts, args.max_new_tokens, tokenizer.eos_token_id),
                     "online": online_on(trainer.online.queries, indices)})  # fmt: skip
    ceiling = recorded_ceiling(args.ceiling, stream, args)
    context = (
        sum(len(dataset[i]["prompt_ids"]) for i in range(len(dataset))) // len(dataset)
        + args.max_new_tokens // 2
    )
    costs = machine_costs(standard, teacher, args.gamma, context, rows)
    for r in rows if ceiling else ():
        r["ceiling"] = ceiling[r["domain"]]
    entries = [e for e in read_log(out) if "alpha_window" in e]
    abrupt = args.stream == "abrupt"
    png = plot_alpha(
        {"online": alpha_series(entries)},
        out / "alpha.png",
        window=args.tail,
        bands=dataset_bands([r["dataset"] for r in stream]) if abrupt else (),
        segment_references=segment_lines(rows) if abrupt else None,
        title=f"Online SD, {TARGET_NAME if Path(args.target) == TARGET_PATH else Path(args.target).name}: {args.per_domain} queries per domain ({args.stream}), "
        f"update every {args.update_interval}",
    )
    command = "python -m osd.demo.online_demo " + " ".join(sys.argv[1:] if argv is None else argv)
    summary = {"command": command.strip(), "machine": machine(), "costs": costs, "wall_s": time.perf_counter() - start, "args": vars(args), "domains": rows, "plot": str(png), "updates": trainer.online.updates,
               "packed_linears": packed, "update_time_share": trainer.online.update_time_s / trainer.online.serve_time_s,
               "background_update_share": trainer.online.background_update_time_s / trainer.online.serve_time_s}  # fmt: skip
    (out / "summary.json").write_text(json.dumps(repo_relative(summary), indent=1))
    print_tables(rows, args.tail, args.gamma)
    print_costs(costs, summary["machine"], args.gamma, args.dtype)
    print(
        f"update time / serving time: {summary['update_time_share']:.3f} on the serving path, "
        f"{summary['background_update_share']:.3f} in the background ({trainer.online.updates} updates)"
    )
    print(f"plot: {png}")
    return summary


if __name__ == "__main__":
    raise SystemExit(run_main(main, "osd.demo.online_demo"))
