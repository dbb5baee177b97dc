"""Standard speculative decoding with the demo pair over each domain's eval prompts.

Per domain it prints the acceptance rate alpha, the mean accepted length (draft tokens
accepted per verification), tokens/s, and the measured speedup over target-only greedy
decoding of the same prompts (the same engine-free cached loop the target would run alone),
plus the theoretical speedup of Eq. 2 from alpha and the measured c.

Usage:
    python -m osd.demo.standard --output benchmarks/results/standard_demo_cpu.json
    python -m osd.demo.standard --prompts_per_domain 40 --max_propose_num 3
    python -m osd.demo.standard --draft outputs/demo_distilled_draft --domains math
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import HfArgumentParser

from osd.conversations import load_conversations, user_query
from osd.cost_model import speedup, speedup_measured_verify
from osd.demo.step_cost import cost_ratio
from osd.models import load_demo_pair
from osd.paths import DOMAINS, DRAFT_PATH, TARGET_PATH, repo_relative, workload_path
from osd.prompting import encode_prompt
from osd.spec import AcceptanceStats, SpeculativeDecoder
from osd.spec.evaluate import target_only_greedy
from osd.spec.gamma import NEEDS_PROPOSALS, STANDARD_TIMING, parse_gamma
from osd.spec.timing import target_pass_time
from osd.spec.weight_major import use_weight_major_linears
from osd.user_errors import run_main


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
    prompts_per_domain: int = field(default=20, metadata={"help": "Eval prompts per domain (0 = all)."})
    gamma: int = field(
        default=STANDARD_TIMING,
        metadata={"help": "Draft tokens proposed per step.", "aliases": ["--max_propose_num"]},
    )
    temperature: float = field(
        default=0.0, metadata={"help": "0 = greedy; > 0 samples (exact rejection sampling)."}
    )
    max_new_tokens: int = field(default=64, metadata={"help": "Generation budget per prompt."})
    seed: int = field(default=0, metadata={"help": "Seed for sampling (temperature > 0)."})
    output: str | None = field(default=None, metadata={"help": "Write the results as JSON here."})
    num_threads: int = field(
        default=1,
        metadata={"help": "torch threads; 1 is fastest for these tiny models (0 = torch's default)."},
    )


def main() -> None:
    (cfg,) = HfArgumentParser(StandardConfig).parse_args_into_dataclasses()
    unknown = set(cfg.domains) - set(DOMAINS)
    if unknown:
        raise ValueError(f"--domains: unknown {sorted(unknown)}; the workload has {DOMAINS}")
    # alpha and Eq. 2 need proposals: gamma >= 1, and room for one after the target's token
    parse_gamma(cfg.gamma, "--gamma", plain_decoding=NEEDS_PROPOSALS)
    if cfg.max_new_tokens < 2:
        raise ValueError(
            f"--max_new_tokens must be 2 or more for a step to propose a token, got {cfg.max_new_tokens}"
        )
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    draft, target, tok = load_demo_pair(
        cfg.draft, cfg.target, getattr(torch, cfg.dtype), getattr(torch, cfg.draft_dtype)
    )
    # a float32 target's faster layout (opt-in, osd.spec.weight_major): for SD, c and the baseline alike
    use_weight_major_linears(target)
    c, t_draft, t_target = cost_ratio(draft, target)
    verify_cost = target_pass_time(target, 64, cfg.gamma + 1) / t_target
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

    rows = []
    for domain in cfg.domains:
        stats = AcceptanceStats.from_outputs(spec_outputs[domain])
        seconds, tokens = baseline[domain]
        alpha = min(stats.alpha, 0.999)
        rows.append({"domain": domain, "prompts": len(spec_outputs[domain]), "alpha": stats.alpha,
                     "accepted_length": stats.mean_accepted_length, "sd_tokens_per_s": stats.tokens_per_s,
                     "target_tokens_per_s": tokens / seconds, "speedup": stats.tokens_per_s / (tokens / seconds),
                     "eq2": speedup(alpha, cfg.gamma, c),
                     "eq2_measured_verify": speedup_measured_verify(alpha, cfg.gamma, c, verify_cost)})  # fmt: skip
    total = AcceptanceStats.from_outputs([o for outs in spec_outputs.values() for o in outs])
    result = {"command": "python -m osd.demo.standard " + " ".join(sys.argv[1:]), "config": asdict(cfg),
              "c": c, "draft_step_ms": t_draft * 1e3, "target_step_ms": t_target * 1e3, "verify_cost": verify_cost,
              "rows": rows, "greedy_identical": len(jobs) - mismatches, "prompts": len(jobs),
              "sample_answers": {d: tok.decode(outs[0].generated_ids[0], skip_special_tokens=True)
                                 for d, outs in spec_outputs.items() if outs},
              "seconds": {"wall": total.wall_time_s, "draft": total.draft_time_s, "verify": total.target_time_s,
                          "accept_reject": total.accept_time_s, "cache": total.cache_time_s}}  # fmt: skip
    print(f"\nStandard speculative decoding, gamma={cfg.gamma}, temperature={cfg.temperature}, c={c:.3f}, "
          f"verify cost {verify_cost:.2f}")  # fmt: skip
    header = f"{'domain':9s}{'prompts':>8s}{'alpha':>8s}{'acc.len':>9s}{'tok/s SD':>10s}{'tok/s AR':>10s}{'speedup':>9s}{'Eq.2':>7s}{'Eq.2 v':>8s}"
    print(header + "\n" + "-" * len(header))
    for r in rows:
        print(f"{r['domain']:9s}{r['prompts']:8d}{r['alpha']:8.3f}{r['accepted_length']:9.2f}"
              f"{r['sd_tokens_per_s']:10.1f}{r['target_tokens_per_s']:10.1f}{r['speedup']:8.2f}x"
              f"{r['eq2']:6.2f}x{r['eq2_measured_verify']:7.2f}x")  # fmt: skip
    print("SD wall time " + ", ".join(f"{k} {v:.1f} s" for k, v in result["seconds"].items()))
    if cfg.temperature == 0:
        print(f"greedy outputs identical to target-only decoding: {len(jobs) - mismatches}/{len(jobs)} prompts"
              + (" (in bf16 a difference can only start at a near-tie of the target's logits)" if cfg.dtype != "float32" else ""))  # fmt: skip
    if cfg.output:
        Path(cfg.output).parent.mkdir(parents=True, exist_ok=True)
        Path(cfg.output).write_text(json.dumps(repo_relative(result), indent=1) + "\n")


if __name__ == "__main__":
    raise SystemExit(run_main(main, "osd.demo.standard"))
