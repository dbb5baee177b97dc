"""The main job's report: Standard SD and the target alone on the online run's tail queries, the alpha
and latency tables, this machine's costs with Eq. 2, and the recorded offline ceiling."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

from osd.alpha import format_alpha
from osd.cost_model import query_time, speedup_measured_verify
from osd.demo.step_cost import cost_ratio
from osd.online.records import QueryStats, queries_alpha, tail_length
from osd.paths import REPO_ROOT
from osd.plots import dataset_bands, plot_alpha
from osd.spec import AcceptanceStats, SpeculativeDecoder
from osd.spec.evaluate import target_only_greedy
from osd.spec.gamma import AUTO, Gamma
from osd.spec.timing import prefill_time, target_pass_time


@torch.inference_mode()
def serve_tail(
    decoder: SpeculativeDecoder, baseline, prompts: list[list[int]], max_new_tokens: int, eos: int
) -> dict:
    """Serve prompts with `decoder` and with the target alone (`baseline`: the target as it decodes fastest
    alone); alpha and (tokens, seconds) of each."""
    outs = [
        decoder.generate(torch.tensor([p]), max_new_tokens=max_new_tokens, eos_token_id=eos) for p in prompts
    ]
    stats = AcceptanceStats.from_outputs(outs)
    sd = {"alpha": stats.alpha, "sd_tokens": stats.num_generated, "sd_s": stats.wall_time_s}
    baseline_tokens, baseline_s = 0, 0.0
    for p in prompts:
        start = time.perf_counter()
        baseline_tokens += len(target_only_greedy(baseline, torch.tensor([p]), max_new_tokens, eos))
        baseline_s += time.perf_counter() - start
    return sd | {"target_tokens": baseline_tokens, "target_s": baseline_s}


class TailServing(TrainerCallback):
    """Standard SD (`decoder`) and the target alone (`baseline`) on each domain's last --tail queries, served as
    soon as the online run has served the last of them, between two of its queries (no update runs then: a
    background update starts only when the next query is served). A machine's speed drifts over a run; served
    after the whole stream, the target alone would be timed minutes away from the online queries it is compared
    with."""

    def __init__(
        self, stream: list[dict], dataset, decoder: SpeculativeDecoder, baseline, eos: int, args
    ) -> None:
        self.tails = {domain: last_of_domain(stream, domain, args.tail) for domain in args.domains}
        self.due = {indices[-1] + 1: domain for domain, indices in self.tails.items()}  # step -> domain
        self.dataset, self.decoder, self.baseline = dataset, decoder, baseline
        self.max_new_tokens, self.eos = args.max_new_tokens, eos
        self.served: dict[str, dict] = {}  # domain -> serve_tail's

    def on_step_end(self, args, state, control, **kwargs):
        domain = self.due.get(state.global_step)  # after step n the stream's queries 0..n-1 are served
        if domain is not None:
            prompts = [self.dataset[i]["prompt_ids"] for i in self.tails[domain]]
            self.served[domain] = serve_tail(
                self.decoder, self.baseline, prompts, self.max_new_tokens, self.eos
            )

    def rows(self, queries: list[QueryStats]) -> list[dict]:
        """Per domain: the online run's alpha and latency on its tail (`queries`: the run's records), and
        Standard SD's and the target alone's."""
        return [
            {"domain": domain, "queries": indices, "online": online_on(queries, indices),
             "standard": self.served[domain]}
            for domain, indices in self.tails.items()
        ]  # fmt: skip


def plot_run(queries: list[QueryStats], rows: list[dict], stream: list[dict], png: Path, target_name: str, args,
             update_interval: int) -> Path:  # fmt: skip
    """Alpha over the stream (each query's, averaged over --tail), with the domains' bands and references."""
    abrupt = args.stream == "abrupt"
    return plot_alpha(
        {"online": alpha_points(queries)}, png, window=args.tail,
        bands=dataset_bands([r["dataset"] for r in stream]) if abrupt else (),
        segment_references=segment_lines(rows) if abrupt else None,
        title=f"Online SD, {target_name}: {args.per_domain} queries per domain ({args.stream}), "
        f"update every {update_interval}",
    )  # fmt: skip


def online_on(queries: list[QueryStats], indices: list[int]) -> dict:
    """Token-weighted alpha and (tokens, seconds) of the online run over the queries at `indices`; the seconds
    charge each query the updates' time on the serving path after it (an update that outlasts the next query's
    serving holds it up)."""
    picked = [queries[i] for i in indices]
    return {"alpha": queries_alpha(picked), "tokens": sum(q.num_generated for q in picked),
            "s": sum(q.wall_time_s + q.update_time_s for q in picked)}  # fmt: skip


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


def print_tables(rows: list[dict], gammas: dict[str, Gamma]) -> None:
    counts = sorted({len(r["queries"]) for r in rows})
    noun = "query" if counts == [1] else "queries"
    online = "adaptive" if gammas["online"] == AUTO else gammas["online"]
    print(f"\nlast {'/'.join(map(str, counts))} {noun} of each domain in the stream (greedy; gamma: Standard SD "
          f"{gammas['standard']}, online SD {online}):")  # fmt: skip
    print(f"{'domain':<10} {'Standard alpha':>15} {'online alpha':>13} {'offline ceiling':>16}")
    for r in rows:
        ceiling = format_alpha(r.get("ceiling"))
        standard, online = format_alpha(r["standard"]["alpha"]), format_alpha(r["online"]["alpha"])
        print(f"{r['domain']:<10} {standard:>15} {online:>13} {ceiling:>16}")
    print("\nlatency on the same queries, tokens/s (speedup over the target alone):")
    print(f"{'domain':<10} {'target only':>12} {'Standard SD':>18} {'online SD':>18}")
    for r in rows + [total_row(rows)]:
        base, std, onl = tokens_per_s(r)
        print(
            f"{r['domain']:<10} {base:>12.1f} {std:>10.1f} ({std / base:.2f}x) {onl:>10.1f} ({onl / base:.2f}x)"
        )


def speedups_over_alone(rows: list[dict]) -> tuple[float, float]:
    """Standard SD's and online SD's speedups over the target alone on all the rows' queries."""
    base, std, onl = tokens_per_s(total_row(rows))
    return std / base, onl / base


def speedups(rows: list[dict]) -> str:
    """`speedups_over_alone`, as printed."""
    std, onl = speedups_over_alone(rows)
    return f"{std:.2f}x, {onl:.2f}x"


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


def mean_tail_alpha(rows: list[dict], run: str) -> float | None:
    """The mean over the domains' rows of their `run` alpha ("standard", "online" or "ceiling"), leaving out rows
    without one (nothing proposed, or no ceiling recorded); None when no row has one."""
    alphas = [
        a for a in (r.get("ceiling") if run == "ceiling" else r[run]["alpha"] for r in rows) if a is not None
    ]
    return sum(alphas) / len(alphas) if alphas else None


def machine_costs(
    standard,
    target,
    baseline,
    gammas: dict[str, Gamma],
    prompt_tokens: int,
    reused_tokens: int,
    rows: list[dict],
    max_gamma: int,
) -> dict[str, float | int | None]:
    """This machine's costs, measured after serving (a few seconds), in steps of the served target: c (a draft step
    in a chain of gamma between target passes, as the engine takes it), the verification of gamma + 1 tokens, the
    prefill of a mean prompt (of `prompt_tokens`, the first `reused_tokens` held from the prompt before), and the
    baseline's step and prefill (`baseline`: the target as it decodes fastest alone). At the mean tail alphas, over
    the baseline: Eq. 2 with the measured verification cost (`eq2_*`), and the same with each side's prefill
    charged to queries of the tails' mean length (`prefill_eq2_*`, `osd.cost_model.query_time`); `*_ceiling` at the
    rows' recorded offline ceilings (None without one). Each run at its gamma (`gammas`: "standard" and "online",
    which the ceiling shares); an adaptive one ("auto") at the gamma in 1..max_gamma whose query Eq. 2 predicts
    fastest at its alpha. `c`, `verify_cost` and `gamma` are online SD's (at the gamma its Eq. 2 took),
    `standard_c`, `standard_verify_cost` Standard SD's."""
    context = prompt_tokens + rows[0]["standard"]["target_tokens"] // (2 * len(rows[0]["queries"]))
    fixed = {g for g in gammas.values() if g != AUTO}
    measured: dict[int, tuple[float, float]] = {}  # gamma -> (c, verification) in steps
    for gamma in sorted(fixed if len(fixed) == len(gammas) else range(1, max_gamma + 1)):
        c, _, step = cost_ratio(standard, target, context, gamma, reps=5, rounds=3)
        measured[gamma] = c, target_pass_time(target, context, gamma + 1, reps=5, rounds=3) / step
    base = step if baseline is target else target_pass_time(baseline, context, reps=5, rounds=3)
    costs = {"baseline_step": base / step, "prefill": prefill_time(target, prompt_tokens, reused_tokens) / step,
             "baseline_prefill": prefill_time(baseline, prompt_tokens, reused_tokens) / step,
             "prompt_tokens": prompt_tokens, "reused_tokens": reused_tokens}  # fmt: skip
    new_tokens = sum(r["standard"]["target_tokens"] for r in rows) / sum(len(r["queries"]) for r in rows)
    alone = costs["baseline_prefill"] + new_tokens * costs["baseline_step"]

    def query(alpha: float, gamma: int) -> float:
        return query_time(alpha, gamma, *measured[gamma], new_tokens, costs["prefill"])

    for run in ("standard", "online", "ceiling"):  # the ceiling: what online distillation could reach
        mean, gamma = mean_tail_alpha(rows, run), gammas["standard" if run == "standard" else "online"]
        if gamma == AUTO:
            gamma = min(measured, key=lambda g: query(mean if mean is not None else 0.0, g))
        if run != "ceiling":
            prefix = "standard_" if run == "standard" else ""
            costs |= {
                f"{prefix}gamma": gamma,
                f"{prefix}c": measured[gamma][0],
                f"{prefix}verify_cost": measured[gamma][1],
            }
        costs[f"eq2_{run}"], costs[f"prefill_eq2_{run}"] = (
            (None, None)
            if mean is None
            else (speedup_measured_verify(mean, gamma, *measured[gamma]) * costs["baseline_step"], alone / query(mean, gamma))
        )  # fmt: skip
    return costs


def print_costs(
    costs: dict[str, float], info: dict, gammas: dict[str, Gamma], layout: str, baseline: str
) -> None:
    where = info.get("gpu") or (
        f"{info['cpu']}, {info['cpu_capability']}, bf16 instructions: "
        f"{', '.join(info['cpu_bf16_instructions']) or 'none'}"
    )
    verifying = f"verifying {costs['gamma'] + 1} tokens costs {costs['verify_cost']:.2f} target steps, a draft step between them {costs['c']:.3f} of one"  # fmt: skip
    if gammas["online"] == AUTO:
        verifying += (
            f" (online SD's adaptive gamma: Eq. 2 at gamma {costs['gamma']}, the best fixed one at its alpha)"
        )
    if costs["standard_gamma"] != costs["gamma"]:
        verifying += (f" ({costs['standard_gamma'] + 1} tokens: {costs['standard_verify_cost']:.2f}, a draft step "
                      f"{costs['standard_c']:.3f}, for Standard SD)")  # fmt: skip
    print(
        f"\nthis machine ({where}): the target serves as {layout}, alone as "
        f"{baseline} ({costs['baseline_step']:.2f} of its steps); {verifying}; Eq. 2 with these "
        f"costs predicts Standard SD {format_alpha(costs['eq2_standard'], '.2f')}x, "
        f"online SD {format_alpha(costs['eq2_online'], '.2f')}x over the target alone; charging each query "
        f"its prefill ({costs['prefill']:.1f} steps served, {costs['baseline_prefill']:.1f} alone, "
        f"{costs['reused_tokens']} of a mean prompt's {costs['prompt_tokens']} tokens taken from the one before): "
        f"{format_alpha(costs['prefill_eq2_standard'], '.2f')}x and {format_alpha(costs['prefill_eq2_online'], '.2f')}x"
        + (
            f"; at the offline ceiling's alphas: {costs['eq2_ceiling']:.2f}x"
            if costs.get("eq2_ceiling")
            else ""
        )
    )
    if costs["verify_cost"] > 1.5:
        print(
            "speculative decoding pays where a verification costs little more than one step (memory-bound "
            "decoding); here it is compute-bound, so it gains little or loses, whatever the draft's alpha"
        )


def alpha_points(queries: list[QueryStats]) -> tuple[list[float], list[float]]:
    """(queries served, alpha) of each query that proposed anything: the plot's online curve."""
    points = [(n, queries_alpha([q])) for n, q in enumerate(queries, start=1)]
    return [float(n) for n, a in points if a is not None], [a for _, a in points if a is not None]


def recorded_ceiling(
    path: str, stream: list[dict], args: argparse.Namespace, drafter: str, gamma: int
) -> dict[str, float] | None:
    """Per-domain alpha of the offline-distilled ceiling from an `osd.analysis.online_replay --offline_steps`
    result (`path`: its file, or a folder of them, e.g. one per gamma), the first recorded on this very stream,
    drafter (a draft model's or a head's folder), `gamma` and answer length, over the tail the tables compare (the
    last third of each block); else None, with a note."""
    if path == "none":
        return None
    files = sorted(Path(path).glob("*.json")) if Path(path).is_dir() else [Path(path)]
    mismatches = []
    for file in files:
        recorded = json.loads(file.read_text())
        same = {
            "stream": [q["id"] for q in recorded["queries"]["standard"]] == [r["id"] for r in stream],
            "draft": (REPO_ROOT / recorded["draft"]).resolve() == Path(drafter).resolve(),
            "gamma": recorded.get("gamma") == gamma,
            "max_new_tokens": recorded.get("max_new_tokens") == args.max_new_tokens,
            "tail": args.tail == tail_length(args.per_domain),
        }
        if all(same.values()) and "offline" in recorded:
            return recorded["offline"]
        differ = ", ".join([k for k, v in same.items() if not v] or ["no offline run"])
        mismatches.append(differ if len(files) == 1 else f"{file.name}: {differ}")
    print(f"--ceiling {path}: recorded with another {'; '.join(mismatches) or 'nothing: no file'}; "
          "the plot has no ceiling line")  # fmt: skip
    return None
