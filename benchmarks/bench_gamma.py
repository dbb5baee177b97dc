"""Gamma per domain at batch size 1: fixed gamma 1..8 against gamma auto and HF's own schedule, greedy.

For each domain of the demo workload, the same eval prompts are decoded to EOS (at most
--max_new_tokens) by: the target alone (through the cache `osd.spec` verifies with), `osd.spec` with every fixed gamma, `osd.spec`
with gamma auto (`osd.spec.adaptive.GammaPolicy`, one policy per domain carried across its prompts,
its costs measured before the timed runs), and HF assisted generation with its heuristic schedule and
confidence threshold (its defaults: start at 20 tokens, +2 after a fully accepted block, -1 otherwise,
stop drafting below confidence 0.4). The methods are interleaved prompt by prompt, so that load on a
shared machine falls on all of them alike. Reports tokens/s, the speedup over the target alone,
alpha and proposals per step per method, and per domain the best fixed gamma and auto over it. Writes {out}/results.json, table.md and speedup.png.

    python -m benchmarks.bench_gamma --threads 1
    python -m benchmarks.bench_gamma --domains sql --num_prompts 2 --gammas 1 4 --out outputs/bench_gamma_smoke
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import torch

from osd.alpha import pooled_alpha
from osd.conversations import load_conversations, user_query
from osd.models import load_demo_pair
from osd.paths import DOMAINS, DRAFT_PATH, TARGET_PATH, workload_path
from osd.prompting import encode_prompt
from osd.results import markdown_table, save_results
from osd.spec import SpeculativeDecoder
from osd.spec.adaptive import GammaPolicy
from osd.spec.draft_vocab import apply_draft_vocab
from osd.spec.hf_generate import timed_generate, timed_target_alone
from osd.spec.weight_major import use_weight_major_linears
from osd.user_errors import run_main

# one prompt -> (generated tokens, seconds, alpha sum, proposals, verification steps)
Method = Callable[[torch.Tensor], tuple[int, float, float, int, int]]


def spec_method(decoder: SpeculativeDecoder, max_new_tokens: int, eos: int) -> Method:
    def run(ids: torch.Tensor) -> tuple[int, float, float, int, int]:
        out = decoder.generate(ids, max_new_tokens=max_new_tokens, eos_token_id=eos)
        return (out.generated_ids.shape[1], out.wall_time_s, out.alpha_sum, out.num_proposed,
                len(out.accepted_lengths))  # fmt: skip

    return run


def target_alone_method(target, max_new_tokens: int, eos: int) -> Method:
    """The target alone through the cache the engine verifies with: the baseline."""

    def run(ids: torch.Tensor) -> tuple[int, float, float, int, int]:
        tokens, seconds = timed_target_alone(target, [ids], max_new_tokens, eos)
        return tokens, seconds, 0.0, 0, 0

    return run


def hf_method(target, max_new_tokens: int, eos: int, pad: int, assistant=None) -> Method:
    """HF greedy `generate` of the target, assisted by `assistant` if given."""
    assistants = None if assistant is None else [assistant]

    def run(ids: torch.Tensor) -> tuple[int, float, float, int, int]:
        tokens, seconds = timed_generate(target, [ids], max_new_tokens, eos, pad, assistants)
        return tokens, seconds, 0.0, 0, 0

    return run


def domain_rows(methods: dict[str, Method], prompts: list[torch.Tensor], domain: str) -> list[dict]:
    """Every method over every prompt, interleaved (in reverse order at every other prompt, so that no
    method always follows the same one); one row per method, speedups over "target only"."""
    totals = {name: [0, 0.0, 0.0, 0, 0] for name in methods}
    for i, ids in enumerate(prompts):
        for name in list(methods)[:: -1 if i % 2 else 1]:
            totals[name] = [a + b for a, b in zip(totals[name], methods[name](ids), strict=True)]
    base = totals["target only"][0] / totals["target only"][1]
    rows = []
    for name, (tokens, seconds, alpha_sum, proposed, steps) in totals.items():
        row = {"domain": domain, "method": name, "tokens": tokens, "tok/s": tokens / seconds,
               "speedup": tokens / seconds / base}  # fmt: skip
        # alpha None where nothing was proposed: gamma auto chooses 0 where this machine makes drafting too dear
        if steps:
            row |= {"alpha": pooled_alpha(alpha_sum, proposed), "proposed / step": proposed / steps}
        rows.append(row)
        print({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
    return rows


def summarize(rows: list[dict], domain: str) -> dict:
    """Best fixed gamma of a domain, and gamma auto against it and against the target alone."""
    mine = {r["method"]: r for r in rows if r["domain"] == domain}
    fixed = {name: r for name, r in mine.items() if name.startswith("gamma ") and name != "gamma auto"}
    best = max(fixed, key=lambda name: fixed[name]["speedup"])
    auto = mine["gamma auto"]["speedup"]
    return {"domain": domain, "best fixed": best, "best fixed speedup": fixed[best]["speedup"],
            "auto speedup": auto, "auto / best fixed": auto / fixed[best]["speedup"],
            "HF heuristic speedup": mine["HF assisted, heuristic"]["speedup"]}  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=str(TARGET_PATH))
    ap.add_argument("--draft", default=str(DRAFT_PATH))
    ap.add_argument("--dtype", default="bfloat16", help="both models' dtype")
    ap.add_argument("--domains", nargs="+", default=list(DOMAINS), choices=DOMAINS)
    ap.add_argument("--num_prompts", type=int, default=6, help="eval prompts per domain")
    ap.add_argument("--gammas", type=int, nargs="+", default=list(range(1, 9)))
    ap.add_argument("--max_new_tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--out", default="outputs/bench_gamma", help="folder for results.json, table.md, speedup.png"
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    draft, target, tok = load_demo_pair(args.draft, args.target, dtype=dtype, draft_dtype=dtype)
    # as the engine does, before gamma auto times the draft: a saved sub-vocabulary head
    apply_draft_vocab(draft)
    use_weight_major_linears(target)  # a float32 CPU target's faster layout, for every method alike
    eos, pad, n = tok.eos_token_id, tok.pad_token_id, args.max_new_tokens
    draft.generation_config.num_assistant_tokens = 20
    draft.generation_config.num_assistant_tokens_schedule = "heuristic"
    draft.generation_config.assistant_confidence_threshold = 0.4
    timed_generate(target, [torch.tensor([[1, 2, 3]])], 4, eos, pad)  # warm-up
    timed_target_alone(target, [torch.tensor([[1, 2, 3]])], 4, eos)  # and the lean step's derived weights
    rows = []
    for domain in args.domains:
        records = load_conversations(workload_path(domain, "eval"))[: args.num_prompts]
        prompts = [torch.tensor([encode_prompt(tok, user_query(r))]) for r in records]
        policy = GammaPolicy()
        policy.measure_costs(draft, target)  # before the timed runs
        methods = {"target only": target_alone_method(target, n, eos)}
        methods |= {
            f"gamma {g}": spec_method(SpeculativeDecoder(draft, target, gamma=g), n, eos) for g in args.gammas
        }
        methods["gamma auto"] = spec_method(
            SpeculativeDecoder(draft, target, gamma="auto", policy=policy), n, eos
        )
        methods["HF assisted, heuristic"] = hf_method(target, n, eos, pad, assistant=draft)
        rows += domain_rows(methods, prompts, domain)
    summary = [summarize(rows, d) for d in args.domains]
    columns = ["domain", "method", "tokens", "tok/s", "speedup", "alpha", "proposed / step"]
    table = markdown_table(rows, columns) + "\n\n" + markdown_table(summary, list(summary[0]))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {"args": vars(args), "rows": rows, "summary": summary}
    save_results(out, results, table, "benchmarks.bench_gamma", argv)
    plot(rows, args.domains, out / "speedup.png")
    return results


def plot(rows: list[dict], domains: list[str], path: Path) -> None:
    """Speedup over the target alone against fixed gamma, one line per domain; auto as a dashed level."""
    import matplotlib.pyplot as plt

    from osd.plots import save_figure  # it selects matplotlib's file-only backend

    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    for i, domain in enumerate(domains):
        mine = [r for r in rows if r["domain"] == domain]
        fixed = [r for r in mine if r["method"].startswith("gamma ") and r["method"] != "gamma auto"]
        line = ax.plot([int(r["method"].split()[1]) for r in fixed], [r["speedup"] for r in fixed], marker="o",
                       label=domain)[0]  # fmt: skip
        auto = next(r["speedup"] for r in mine if r["method"] == "gamma auto")
        ax.axhline(
            auto,
            color=line.get_color(),
            linestyle="--",
            linewidth=1,
            label="gamma auto (dashed)" if i == 0 else None,
        )
    ax.axhline(1.0, color="grey", linewidth=1)
    ax.set(xlabel="fixed gamma", ylabel="speedup over the target alone (B = 1)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks.bench_gamma"))
