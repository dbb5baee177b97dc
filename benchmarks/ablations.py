"""Ablations on the demo pair (issue 12, item 4): gamma, context length, draft size, draft training.

Every timed run decodes a fixed number of tokens per prompt (--max_new_tokens, EOS ignored, so
every configuration does the same work), greedy, one torch thread. Target-only decoding runs through
the cache the engine verifies with (`osd.spec.hf_generate.timed_target_alone`), speculative decoding is
`osd.spec` (its own wall clock). The machine may be shared with one other 1-thread job, so the
configurations a run compares are interleaved: for each prompt, target-only decoding and every
speculative configuration run one after the other, in an order rotated by one per prompt, so that
load from other jobs falls on all of them alike. c and the verify cost (target pass over
gamma + 1 tokens / single-token step) are measured with `osd.spec.timing.target_pass_time` (median of
repetitions, best of rounds) at the run's mean decoding context; Eq. 2 and Eq. 2 with the measured
verify cost are `osd.cost_model`'s, at the live run's alpha. The costs are medians over rounds of
per-round ratios (`costs`).

Subcommands (each writes `{out}/parts/NAME.json` with its command; `report` merges them into
`{out}/results.json`, `table.md` and one png per ablation, see `osd.analysis.ablation_report`):

    # gamma: alpha replayed by osd.analysis.simulate from one recording of the target, and live
    python -m benchmarks.ablations gamma --gammas 1 2 3 4 5 --part gamma_1-5
    # context: prompts cut to exactly L tokens
    python -m benchmarks.ablations context --lengths 32 64 128 --part context_short
    # named drafts on one domain's eval prompts (draft size; online vs offline vs Standard)
    python -m benchmarks.ablations drafts --part draft_size --drafts 1x128=outputs/ablations/drafts/1x128/standard ...
    python -m benchmarks.ablations report
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from osd.analysis.record import record_prompts, recording_header
from osd.analysis.recording import Recording, load_recording, tokenizer_identity
from osd.analysis.simulate import simulate, simulated_alpha
from osd.conversations import assistant_answer, load_conversations, user_query
from osd.cost_model import speedup, speedup_measured_verify
from osd.distill.data import truncate_prompt
from osd.distill.lm_training import num_params
from osd.model_checks import check_same_tokenizer
from osd.models import load_demo_pair
from osd.paths import DOMAINS, DRAFT_PATH, TARGET_PATH, workload_path
from osd.prompting import encode_prompt
from osd.results import write_part
from osd.spec import SpeculativeDecoder
from osd.spec.evaluate import AcceptanceStats
from osd.spec.gamma import NEEDS_PROPOSALS, NO_POLICY, STANDARD_TIMING, add_gamma_flag, gamma_arg
from osd.spec.hf_generate import timed_target_alone
from osd.spec.timing import draft_step_time, mid_answer_context, target_pass_time
from osd.spec.weight_major import use_weight_major_linears
from osd.user_errors import run_main

Prompt = tuple[str, list[int]]  # (id, prompt token ids)
TARGET_ONLY = "target only"


def workload_prompts(
    tokenizer: PreTrainedTokenizerBase, domains: Sequence[str], per_domain: int
) -> list[Prompt]:
    """The first `per_domain` eval queries of each domain, chat-template encoded."""
    return [
        (f"{d}/{i}", encode_prompt(tokenizer, user_query(r)))
        for d in domains
        for i, r in enumerate(load_conversations(workload_path(d, "eval"))[:per_domain])
    ]


def context_prompts(
    tokenizer: PreTrainedTokenizerBase, domains: Sequence[str], per_domain: int, length: int
) -> list[Prompt]:
    """Prompts of exactly `length` tokens: the user turn is other eval records of the domain (query and
    reference answer) followed by the eval query; the chat prompt is cut to its first token and last
    `length - 1` (`osd.distill.data.truncate_prompt`), so the query and the assistant header stay."""
    prompts = []
    for d in domains:
        records = load_conversations(workload_path(d, "eval"))
        for i, r in enumerate(records[:per_domain]):
            others, shots = records[per_domain:], []
            ids = encode_prompt(tokenizer, user_query(r))
            for other in others:
                if len(ids) > length:
                    break
                shots.append(f"{user_query(other)}\n{assistant_answer(other) or ''}")
                ids = encode_prompt(tokenizer, "\n\n".join([*shots, user_query(r)]))
            if len(ids) < length:
                raise ValueError(f"--lengths {length}: the {d} eval records give only {len(ids)} tokens")
            prompts.append((f"{d}/{i}", truncate_prompt(ids, length)))
    return prompts


def load_draft(path: str | Path, target_path: str | Path, tokenizer, dtype: torch.dtype) -> PreTrainedModel:
    """A draft in `dtype`, refused unless it shares the target's tokenizer."""
    check_same_tokenizer(path, target_path, tokenizer)
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()


def as_tensors(prompts: Sequence[Prompt]) -> list[torch.Tensor]:
    return [torch.tensor([ids]) for _, ids in prompts]  # each [1, T]


def interleaved(
    target: PreTrainedModel,
    configs: dict,
    prompts: Sequence[Prompt],
    max_new_tokens: int,
) -> tuple[dict, dict[object, AcceptanceStats]]:
    """Target-only greedy decoding (through the engine's cache) and `osd.spec` with each (draft, gamma) of `configs` (by name),
    every one to exactly max_new_tokens per prompt, interleaved per prompt in an order rotated by one
    each prompt. Returns (target-only tokens, seconds, tokens/s; AcceptanceStats by name)."""
    decoders = {
        name: SpeculativeDecoder(draft, target, gamma=gamma) for name, (draft, gamma) in configs.items()
    }
    names, outputs = [TARGET_ONLY, *decoders], {name: [] for name in decoders}
    tokens, seconds = 0, 0.0
    for i, ids in enumerate(as_tensors(prompts)):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            if name == TARGET_ONLY:
                t, s = timed_target_alone(target, [ids], max_new_tokens, None)
                tokens, seconds = tokens + t, seconds + s
            else:
                out = decoders[name].generate(ids, max_new_tokens=max_new_tokens, eos_token_id=None)
                outputs[name].append(out)
    base = {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}
    return base, {name: AcceptanceStats.from_outputs(o) for name, o in outputs.items()}


def costs(draft, target, context: int, gammas: Sequence[int], rounds: int, reps: int) -> dict:
    """Target and draft step (ms), c, and the verify cost of gamma + 1 tokens for each gamma: each round
    times every forward once (`target_pass_time`, median of `reps`), and every ratio is the median over
    rounds of that round's ratio, so that load changing between rounds cancels in the ratios."""
    lengths = [1, *(g + 1 for g in gammas)]
    per_round = [
        ([target_pass_time(target, context, n, reps=reps, rounds=1) for n in lengths], draft_step_time(draft, context, reps=reps, rounds=1))
        for _ in range(rounds)
    ]  # fmt: skip
    target_steps = [t[0] for t, _ in per_round]
    return {
        "target_step_ms": 1e3 * statistics.median(target_steps),
        "draft_step_ms": 1e3 * statistics.median(d for _, d in per_round),
        "c": statistics.median(d / t[0] for t, d in per_round),
        "verify_cost": {
            g: statistics.median(t[i + 1] / t[0] for t, _ in per_round) for i, g in enumerate(gammas)
        },
        "rounds": rounds,
    }


def spec_row(stats: AcceptanceStats, base_tps: float, gamma: int, c: float, verify_cost: float) -> dict:
    """One configuration: live alpha and speed, and both Eq. 2 predictions at its alpha."""
    measured = stats.tokens_per_s / base_tps
    eq2 = speedup(stats.alpha, gamma, c)
    eq2_verify = speedup_measured_verify(stats.alpha, gamma, c, verify_cost)
    return {
        "gamma": gamma, "alpha": stats.alpha, "mean_accepted_length": stats.mean_accepted_length,
        "tokens_per_s": stats.tokens_per_s, "target_tokens_per_s": base_tps, "speedup": measured,
        "c": c, "verify_cost": verify_cost, "eq2": eq2, "eq2_verify": eq2_verify,
        "measured_over_eq2": measured / eq2, "measured_over_eq2_verify": measured / eq2_verify,
    }  # fmt: skip


class Session:
    """The demo pair loaded once per run, and the run's target-only timings."""

    def __init__(self, args: argparse.Namespace) -> None:
        torch.set_num_threads(args.threads)
        self.args, self.dtype = args, getattr(torch, args.dtype)
        self.draft, self.target, self.tokenizer = load_demo_pair(
            args.draft, args.target, self.dtype, self.dtype
        )
        use_weight_major_linears(self.target)  # a float32 target's faster layout, target-only runs included
        self.baselines: list[dict] = []

    def run(self, configs: dict, prompts: Sequence[Prompt]) -> tuple[float, dict[object, AcceptanceStats]]:
        """Warm up, then `interleaved`; returns (target-only tokens/s, AcceptanceStats by name)."""
        interleaved(self.target, configs, prompts[:1], 8)  # warm-up
        base, stats = interleaved(self.target, configs, prompts, self.args.max_new_tokens)
        self.baselines.append(base)
        return base["tokens_per_s"], stats

    def costs(self, draft: PreTrainedModel, context: int, gammas: Sequence[int]) -> dict:
        return costs(draft, self.target, context, gammas, self.args.cost_rounds, self.args.cost_reps)

    def record(self) -> dict:
        return {
            "target": self.args.target, "draft": self.args.draft, "dtype": self.args.dtype,
            "threads": torch.get_num_threads(), "max_new_tokens": self.args.max_new_tokens,
            "timing": "per prompt: target-only and each configuration in turn (order rotated by one per "
                      "prompt); the machine shared with one other 1-thread job",
            "cost_rounds": self.args.cost_rounds, "cost_reps": self.args.cost_reps,
            "target_only": self.baselines,
        }  # fmt: skip


def recorded(session: Session, prompts: Sequence[Prompt], stem: Path) -> Recording:
    """The target's greedy outputs on `prompts` (EOS ignored), recorded once at `stem` and reused."""
    if Path(f"{stem}.jsonl").exists():
        recording = load_recording(stem)
        if [p.prompt_ids for p in recording.prompts] != [ids for _, ids in prompts]:
            raise ValueError(
                f"{stem}.jsonl: recorded on other prompts; delete it or pass another --recording"
            )
        return recording
    header = recording_header(
        session.args.target, session.tokenizer, "workload eval queries (benchmarks.ablations)"
    )
    recording = record_prompts(
        session.target, prompts, header, session.args.max_new_tokens, eos_token_id=None
    )
    recording.save(stem)
    return recording


def run_gamma(session: Session) -> dict:
    """gamma in --gammas: simulated and live alpha, live speedup, Eq. 2 and Eq. 2 with measured verify."""
    args = session.args
    prompts = workload_prompts(session.tokenizer, args.domains, args.per_domain)
    recording = recorded(session, prompts, Path(args.recording))
    identity = tokenizer_identity(session.tokenizer)
    simulated = {
        g: simulated_alpha(simulate(recording, session.draft, identity, gamma=g)) for g in args.gammas
    }
    base, runs = session.run({g: (session.draft, g) for g in args.gammas}, prompts)
    cost = session.costs(
        session.draft, mid_answer_context((len(ids) for _, ids in prompts), args.max_new_tokens), args.gammas
    )
    rows = [
        spec_row(runs[g], base, g, cost["c"], cost["verify_cost"][g]) | {"alpha_simulated": simulated[g]}
        for g in args.gammas
    ]
    return {"prompts": len(prompts), "recording": args.recording, "costs": cost, "rows": rows}


def run_context(session: Session) -> dict:
    """Prompt lengths in --lengths: c, verify cost, live speedup at --max_propose_num, and Eq. 2's drift."""
    args, rows = session.args, []
    for length in args.lengths:
        prompts = context_prompts(session.tokenizer, args.domains, args.per_domain, length)
        base, runs = session.run({"sd": (session.draft, args.gamma)}, prompts)
        cost = session.costs(session.draft, length + args.max_new_tokens // 2, [args.gamma])
        row = spec_row(runs["sd"], base, args.gamma, cost["c"], cost["verify_cost"][args.gamma])
        rows.append(
            {"prompt_tokens": length, **row, **{k: cost[k] for k in ("target_step_ms", "draft_step_ms")}}
        )
        print(f"[context] {rows[-1]}", flush=True)
    return {"prompts_per_length": len(prompts), "rows": rows}


def run_drafts(session: Session) -> dict:
    """Each NAME=PATH in --drafts on the same prompts at --max_propose_num: params, c, alpha, speedup, Eq. 2."""
    args = session.args
    prompts = workload_prompts(session.tokenizer, args.domains, args.per_domain)
    context = mid_answer_context((len(ids) for _, ids in prompts), args.max_new_tokens)
    drafts = {}
    for spec in args.drafts:
        name, sep, path = spec.partition("=")
        if not sep:
            raise ValueError(f"--drafts {spec!r}: expected NAME=PATH")
        drafts[name] = (path, load_draft(path, args.target, session.tokenizer, session.dtype))
    base, runs = session.run({name: (d, args.gamma) for name, (_, d) in drafts.items()}, prompts)
    rows = []
    for name, (path, draft) in drafts.items():
        cost = session.costs(draft, context, [args.gamma])
        row = spec_row(runs[name], base, args.gamma, cost["c"], cost["verify_cost"][args.gamma])
        rows.append({"name": name, "path": path, "params_m": num_params(draft) / 1e6, **row})
    return {"prompts": len(prompts), "rows": rows}


RUNS = {"gamma": run_gamma, "context": run_context, "drafts": run_drafts}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="ablation", required=True)
    for name in RUNS:
        p = sub.add_parser(name)
        p.add_argument("--part", default=name, help="name of this run's record under {out}/parts/")
        p.add_argument("--target", default=str(TARGET_PATH))
        p.add_argument("--draft", default=str(DRAFT_PATH), help="the draft (gamma, context)")
        p.add_argument("--dtype", default="bfloat16", help="both models' dtype")
        p.add_argument("--domains", nargs="+", default=list(DOMAINS), help="workload domains of the prompts")
        p.add_argument("--per_domain", type=int, default=2, help="eval prompts per domain")
        p.add_argument("--max_new_tokens", type=int, default=48, help="tokens per prompt (EOS ignored)")
        p.add_argument("--threads", type=int, default=1)
        p.add_argument("--cost_rounds", type=int, default=15, help="rounds of the cost timings (see costs)")
        p.add_argument("--cost_reps", type=int, default=3, help="forwards per model per round (median)")
        p.add_argument("--out", default="outputs/ablations")
    gamma, context, drafts = (sub.choices[n] for n in RUNS)
    # Eq. 2 needs a live alpha (proposals) and a fixed gamma to charge
    fixed = {"plain_decoding": NEEDS_PROPOSALS, "auto": NO_POLICY}
    gamma.add_argument("--gammas", type=gamma_arg("--gammas", **fixed), nargs="+", default=list(range(1, 11)))
    gamma.add_argument(
        "--recording", default="outputs/ablations/gamma_recording", help="stem, recorded if absent"
    )
    context.add_argument("--lengths", type=int, nargs="+", default=[32, 64, 128, 256, 448])
    for p in (context, drafts):
        add_gamma_flag(p, STANDARD_TIMING, "the pair's best_gamma", **fixed)
    drafts.add_argument("--drafts", nargs="+", required=True, help="NAME=PATH of each draft")
    report = sub.add_parser("report", help="merge {out}/parts into results.json, table.md and plots")
    report.add_argument("--out", default="outputs/ablations")
    return ap


def main(argv: Sequence[str] | None = None) -> dict:
    args = parser().parse_args(argv)
    if args.ablation == "report":
        from osd.analysis.ablation_report import report  # matplotlib: only for the report

        return report(Path(args.out))
    record = RUNS[args.ablation](session := Session(args))
    record = {"ablation": args.ablation, **session.record(), **record}
    path = write_part(Path(args.out), args.part, "benchmarks.ablations", argv, record)
    print(json.dumps(record["rows"], indent=1), f"\nwrote {path}")
    return record


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks.ablations"))
