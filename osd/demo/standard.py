"""Standard speculative decoding with the demo pair over each domain's eval prompts.

Per domain it prints the acceptance rate alpha, the mean accepted length (draft tokens
accepted per verification), tokens/s, and the measured speedup over target-only greedy
decoding of the same prompts (the same engine-free cached loop the target would run alone),
plus the theoretical speedup of Eq. 2 from alpha and the measured c.

Usage:
    python -m osd.demo.standard                                 # ~2 min on 2 CPU cores
    python -m osd.demo.standard --prompts_per_domain 40 --gamma 3
    python -m osd.demo.standard --draft outputs/demo_distilled_draft --domains math
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm
from transformers import HfArgumentParser

from osd.conversations import load_conversations, user_query
from osd.cost_model import speedup
from osd.demo import DOMAINS, DRAFT_PATH, TARGET_PATH, load_demo_pair, workload_path
from osd.demo.step_cost import cost_ratio
from osd.prompting import encode_prompt
from osd.spec import AcceptanceStats, SpeculativeDecoder
from osd.spec.evaluate import target_only_greedy


@dataclass
class StandardConfig:
    draft: str = field(
        default=str(DRAFT_PATH), metadata={"help": "Draft model path (default: the demo draft)."}
    )
    target: str = field(
        default=str(TARGET_PATH),
        metadata={"help": "Target model path (default: the demo target, SmolLM2-135M-Instruct)."},
    )
    dtype: str = field(
        default="bfloat16", metadata={"help": "The target's dtype (bfloat16, float32, float16)."}
    )
    draft_dtype: str = field(default="bfloat16", metadata={"help": "The draft's dtype."})
    domains: list[str] = field(
        default_factory=lambda: list(DOMAINS), metadata={"help": "Workload domains to run."}
    )
    prompts_per_domain: int = field(default=40, metadata={"help": "Eval prompts per domain (0 = all)."})
    gamma: int = field(default=4, metadata={"help": "Draft tokens proposed per step (--max_propose_num)."})
    temperature: float = field(
        default=0.0, metadata={"help": "0 = greedy; > 0 samples (exact rejection sampling)."}
    )
    max_new_tokens: int = field(default=96, metadata={"help": "Generation budget per prompt."})
    seed: int = field(default=0, metadata={"help": "Seed for sampling (temperature > 0)."})
    num_threads: int = field(
        default=1,
        metadata={"help": "torch threads; 1 is fastest for these tiny models (0 = torch's default)."},
    )


def main() -> None:
    (cfg,) = HfArgumentParser(StandardConfig).parse_args_into_dataclasses()
    unknown = set(cfg.domains) - set(DOMAINS)
    if unknown:
        raise ValueError(f"--domains: unknown {sorted(unknown)}; the workload has {DOMAINS}")
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    draft, target, tok = load_demo_pair(
        cfg.draft, cfg.target, getattr(torch, cfg.dtype), getattr(torch, cfg.draft_dtype)
    )
    c, t_draft, t_target = cost_ratio(draft, target)
    print(f"c = draft step / target step = {t_draft * 1e3:.2f} ms / {t_target * 1e3:.2f} ms = {c:.3f}")

    jobs = []
    for domain in cfg.domains:
        records = load_conversations(workload_path(domain, "eval"))
        records = records[: cfg.prompts_per_domain] if cfg.prompts_per_domain else records
        jobs += [(domain, torch.tensor([encode_prompt(tok, user_query(r))])) for r in records]

    decoder = SpeculativeDecoder(draft, target, gamma=cfg.gamma)
    generator = torch.Generator().manual_seed(cfg.seed)
    spec_outputs: dict[str, list] = {d: [] for d in cfg.domains}
    baseline: dict[str, list[float]] = {d: [0.0, 0] for d in cfg.domains}  # [seconds, tokens]
    mismatches = 0
    for domain, ids in tqdm(jobs, desc="standard SD + target-only", unit="prompt"):
        out = decoder.generate(
            ids, cfg.max_new_tokens, cfg.temperature, eos_token_id=tok.eos_token_id, generator=generator
        )
        spec_outputs[domain].append(out)
        start = time.perf_counter()
        reference = target_only_greedy(target, ids, cfg.max_new_tokens, tok.eos_token_id)
        baseline[domain][0] += time.perf_counter() - start
        baseline[domain][1] += len(reference)
        mismatches += cfg.temperature == 0 and out.generated_ids[0].tolist() != reference

    print(f"\nStandard speculative decoding, gamma={cfg.gamma}, temperature={cfg.temperature}, c={c:.3f}")
    header = f"{'domain':9s}{'prompts':>8s}{'alpha':>8s}{'acc.len':>9s}{'tok/s SD':>10s}{'tok/s AR':>10s}{'speedup':>9s}{'Eq.2':>7s}"
    print(header + "\n" + "-" * len(header))
    for domain in cfg.domains:
        stats = AcceptanceStats.from_outputs(spec_outputs[domain])
        seconds, tokens = baseline[domain]
        ar_rate = tokens / seconds
        print(f"{domain:9s}{len(spec_outputs[domain]):8d}{stats.alpha:8.3f}{stats.mean_accepted_length:9.2f}"
              f"{stats.tokens_per_s:10.1f}{ar_rate:10.1f}{stats.tokens_per_s / ar_rate:8.2f}x"
              f"{speedup(min(stats.alpha, 0.999), cfg.gamma, c):6.2f}x")  # fmt: skip
    total = AcceptanceStats.from_outputs([o for outs in spec_outputs.values() for o in outs])
    other = total.wall_time_s - total.draft_time_s - total.target_time_s
    print(
        f"SD wall time {total.wall_time_s:.1f} s = draft {total.draft_time_s:.1f} s + target "
        f"{total.target_time_s:.1f} s + engine bookkeeping {other:.1f} s"
    )
    ar_token_s = sum(s for s, _ in baseline.values()) / sum(n for _, n in baseline.values())
    print(
        f"effective c inside the engine (draft seconds per drafted token, ~gamma per step, / target-only seconds "
        f"per token): {total.draft_time_s / (cfg.gamma * total.num_steps) / ar_token_s:.3f}"
    )
    if cfg.temperature == 0:
        print(
            f"greedy outputs identical to target-only decoding: {len(jobs) - mismatches}/{len(jobs)} prompts"
        )


if __name__ == "__main__":
    main()
