"""The target alone and Standard SD over the main job's prompts, with and without the prefix cache.

Chat prompts in a stream begin alike (the template's system prompt, a domain's instruction), and the engine's lean
cache takes a prompt's leading tokens shared with the prompt before from that prompt's keys and values
(`osd.spec.lean_llama.LeanLlamaCache`, `reuse_prompt`). This serves the first --per_domain prompts of each domain of
the main job's stream, in its order, through the target alone (`target_only_greedy`) and Standard SD
(`SpeculativeDecoder`, the draft as shipped), with the prompts' prefixes taken and computed whole, in alternating
rounds (the best round of each counts), and writes tokens/s and the speedups with the machine to --out. The
target and gamma are the main job's start-up choice (`osd.spec.serving_choice.measure_and_choose`).

    python -m benchmarks.prompt_reuse
    bash bash_scripts/hold_to_avx2.sh python -m benchmarks.prompt_reuse --out outputs/prompt_reuse_avx2.json
"""

from __future__ import annotations

import argparse
import time

import torch

from osd.conversations import user_query
from osd.demo.target import ensure_if_demo_target
from osd.models import load_model, load_tokenizer
from osd.paths import DOMAINS, DRAFT_PATH, TARGET_PATH
from osd.prompting import encode_prompt
from osd.results import write_result
from osd.spec import SpeculativeDecoder
from osd.spec.draft_vocab import apply_draft_vocab
from osd.spec.evaluate import target_only_greedy
from osd.spec.lean_llama import prompt_sizes
from osd.spec.serving_choice import measure_and_choose, retype_draft
from osd.streams import abrupt_stream, load_sources
from osd.user_errors import run_main

METHODS = ("target alone", "Standard SD")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=str(TARGET_PATH))
    ap.add_argument("--draft", default=str(DRAFT_PATH))
    ap.add_argument("--domains", nargs="+", default=list(DOMAINS))
    ap.add_argument(
        "--per_domain", type=int, default=8, help="prompts served of each domain, in stream order"
    )
    ap.add_argument("--max_new_tokens", type=int, default=32)
    ap.add_argument(
        "--rounds", type=int, default=2, help="alternating rounds of every configuration; the best counts"
    )
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--out", default="outputs/prompt_reuse.json")
    return ap.parse_args(argv)


def serve(
    method: str, engine: SpeculativeDecoder, prompts: list[torch.Tensor], max_new_tokens: int, eos: int | None
) -> tuple[int, float]:
    """(tokens, seconds) of serving `prompts` in turn by `method` (METHODS), prefixes taken where the engine's
    `reuse_prompt`, ending at `eos` (the tokenizer's, as the main job's)."""
    tokens, start = 0, time.perf_counter()
    for prompt in prompts:
        if method == "target alone":
            tokens += len(target_only_greedy(engine.target, prompt, max_new_tokens, eos, engine.reuse_prompt))
        else:
            tokens += engine.generate(prompt, max_new_tokens, eos_token_id=eos).generated_ids.shape[1]
    return tokens, time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    ensure_if_demo_target(args.target)
    tokenizer = load_tokenizer(args.target, None)
    stream = abrupt_stream(load_sources(args.domains), [args.per_domain] * len(args.domains))
    ids = [encode_prompt(tokenizer, user_query(record)) for record in stream]
    prompts = [torch.tensor([p]) for p in ids]  # [1, T] each
    prompt_tokens, reused = prompt_sizes(ids)  # a mean prompt, and its tokens shared with the one before
    draft = apply_draft_vocab(load_model(args.draft, None, None).eval())
    choice, targets = measure_and_choose(
        load_model(args.target, None, None).eval(), draft, 0.4, 5, prompt_tokens, args.max_new_tokens,
        reused_tokens=reused,
    )  # fmt: skip
    retype_draft(draft, choice.layout)
    models = {"target alone": targets[choice.baseline], "Standard SD": targets[choice.layout]}
    best: dict[tuple[str, bool], tuple[int, float]] = {}
    for _ in range(args.rounds):
        for reuse in (False, True):
            for method in METHODS:
                engine = SpeculativeDecoder(draft, models[method], gamma=choice.gamma, reuse_prompt=reuse)
                tokens, seconds = serve(method, engine, prompts, args.max_new_tokens, tokenizer.eos_token_id)
                if seconds < best.get((method, reuse), (0, float("inf")))[1]:
                    best[method, reuse] = tokens, seconds
    rate = {key: tokens / seconds for key, (tokens, seconds) in best.items()}
    rows = [
        {"method": method, "reuse_prompt": reuse, "tokens": best[method, reuse][0], "s": best[method, reuse][1],
         "tokens_per_s": rate[method, reuse]}
        for method in METHODS for reuse in (False, True)
    ]  # fmt: skip
    speedup = {  # of Standard SD over the target alone
        name: rate["Standard SD", reuse] / rate["target alone", reuse]
        for name, reuse in (("prompts_whole", False), ("prefix_taken", True))
    }
    print(f"{len(prompts)} prompts, {reused} of a mean prompt's {prompt_tokens} tokens shared with the one before; "
          f"target alone as {choice.baseline}, Standard SD as {choice.layout} at gamma {choice.gamma}")  # fmt: skip
    print(f"{'tokens/s':13s} {'prompts whole':>14s} {'prefix taken':>13s}  gain")
    for method in METHODS:
        whole, taken = rate[method, False], rate[method, True]
        print(f"{method:13s} {whole:14.1f} {taken:13.1f}  {taken / whole - 1:+.1%}")
    whole, taken = speedup["prompts_whole"], speedup["prefix_taken"]
    print(f"Standard SD over the target alone: {whole:.3f}x -> {taken:.3f}x")
    serving = {"baseline": choice.baseline, "layout": choice.layout, "gamma": choice.gamma}
    return write_result(args.out, "benchmarks.prompt_reuse", argv, args, {
        "serving": serving, "prompt_tokens": prompt_tokens, "reused_tokens": reused, "rows": rows, "speedup": speedup,
    })  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks.prompt_reuse"))
