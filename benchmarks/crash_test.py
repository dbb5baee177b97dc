"""Crash test: `osd.train` runs SIGKILLed at random moments and while a checkpoint is being written,
then rerun with the same command until they finish; the final weights and every reported figure
(`osd.distill.run_dir.reported_figures`: metrics.jsonl, trainer_state.json, run.json) must equal an
uninterrupted run's.

    python -m benchmarks.crash_test                       # 24 kills: 14 minutes on a busy 2-core machine
    python -m benchmarks.crash_test --kills 40 --seed 1

Two runs on the tiny demo pair (osd/demo/models/tiny) and the first records of data/local's sql
split: online (a checkpoint every 4 queries, an update every 2) and offline (`mix_token` sampled at
temperature 0.7, so the sampling generator matters; a checkpoint every 3 steps, alpha every 6).
Each trial starts one of them from an empty folder and kills it --kills_per_trial times, each kill
either at a random moment (0.2-0.7 times the uninterrupted run's wall time after the start; a
process that finishes first is not killed) or a random 0-50 ms into the 1st or 2nd checkpoint
write of that process (its staging folder appeared); `trial(kinds=...)` may also kill a random
0-50 ms after a random write to metrics.jsonl, i.e. at a random step (tests/distill/test_kill_resume.py).
Every launch is the same command, with `--resume_from_checkpoint last`. Once a run has finished it is rerun once more, which must change
nothing. Trials alternate between the two runs until --kills kills were made. Writes
{out}/results.json and table.md (machine paths made repo-relative).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from osd.distill.callbacks import METRICS_FILE
from osd.distill.checkpoints import STAGING_DIR
from osd.distill.run_dir import FINAL_STATE, reported_figures
from osd.paths import REPO_ROOT, TINY_DRAFT_PATH, TINY_TEACHER_PATH, repo_relative, workload_path
from osd.user_errors import run_main

COMMON = [
    "--student_model_path", str(TINY_DRAFT_PATH), "--teacher_model_path", str(TINY_TEACHER_PATH),
    "--max_propose_num", "3", "--learning_rate", "1e-3", "--save_strategy", "steps", "--logging_steps", "1",
    "--use_cpu", "True", "--report_to", "none", "--disable_tqdm", "True", "--seed", "0",
    "--resume_from_checkpoint", "last",
]  # fmt: skip
RUNS = {
    "online": ["--mode", "online", "--max_new_tokens", "32", "--online_update_interval", "2",
               "--online_eval_interval", "1", "--per_device_train_batch_size", "1", "--num_train_epochs", "1",
               "--save_steps", "4"],
    "offline": ["--mode", "offline", "--sample_source", "mix_token", "--sample_temperature", "0.7",
                "--max_new_tokens", "24", "--per_device_train_batch_size", "4", "--max_steps", "12",
                "--save_steps", "3", "--eval_strategy", "steps", "--eval_steps", "6",
                "--eval_data_path", str(workload_path("sql", "eval")), "--max_eval_samples", "6"],
}  # fmt: skip
RECORDS = {"online": 24, "offline": 48}  # the first records of data/local/sql_train.json
FINAL_FILES = (METRICS_FILE, FINAL_STATE, "model.safetensors")
KINDS = ("random", "checkpoint")  # v2's kill schedule; "step" kills after a random metrics.jsonl write
# what osd.train logs about where a launch starts from
LOGGED = (
    "resuming from",
    "skipping",
    "starts from step 0",
    "holds a finished run",
    "restored without training",
)


def command(run: str, data: Path, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "osd.train",
        *COMMON,
        *RUNS[run],
        "--data_path",
        str(data),
        "--output_dir",
        str(out),
    ]


def staged_checkpoints(out: Path, since: float) -> list[str]:
    """Checkpoints whose write began after `since` (time.time()) and has not been committed."""
    found = []
    try:
        names = os.listdir(out / STAGING_DIR)
    except FileNotFoundError:  # no write under way (the folder is removed after each commit)
        return []
    for name in names:
        try:
            if name.startswith("checkpoint-") and (out / STAGING_DIR / name).stat().st_mtime >= since:
                found.append(name)
        except FileNotFoundError:  # committed meanwhile
            pass
    return sorted(found)


def file_version(path: Path) -> tuple[int, int] | None:
    """(size, mtime) of a file, None when it is missing: a change means a write."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_size, stat.st_mtime_ns


def launch(
    cmd: list[str], out: Path, log: Path, kill: str | None, kill_at: float, nth_write: int = 1
) -> dict:
    """One process of the command; kill: None, 'random' (at kill_at s), 'checkpoint' (a random
    0-50 ms into the nth_write-th checkpoint write of this process) or 'step' (a random 0-50 ms
    after the nth_write-th write to metrics.jsonl that this process is seen making)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    offset = log.stat().st_size if log.exists() else 0
    start, since, writes = time.monotonic(), time.time(), set()
    metrics, metrics_writes = file_version(out / METRICS_FILE), 0
    result: dict = {"planned": kill, "killed": None}
    with log.open("a") as f:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            elapsed = time.monotonic() - start
            if kill == "checkpoint":
                writes.update(staged_checkpoints(out, since))
            elif kill == "step" and (now := file_version(out / METRICS_FILE)) != metrics:
                metrics, metrics_writes = now, metrics_writes + 1
            if (kill == "random" and elapsed >= kill_at) or max(len(writes), metrics_writes) >= nth_write:
                if kill != "random":
                    time.sleep(random.uniform(0.0, 0.05))
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                torn = staged_checkpoints(out, since)
                result = {
                    "killed": kill,
                    "at_s": round(elapsed, 2),
                    "torn_checkpoint": torn[-1] if torn else None,
                }
                break
            time.sleep(0.0005)
    if result["killed"] is None:
        result |= {"rc": proc.returncode, "wall_s": round(time.monotonic() - start, 1)}
    with log.open() as f:
        f.seek(offset)
        result["log"] = [line.split(": ", 1)[-1].strip() for line in f if any(k in line for k in LOGGED)]
    return result


def outcome(out: Path) -> tuple[dict, dict]:
    """A finished run's weights and reported figures."""
    return load_file(out / "model.safetensors"), reported_figures(out)


def reference(run: str, data: Path, out: Path) -> tuple[tuple[dict, dict], float]:
    """An uninterrupted run of `run` into `out`: its outcome and wall time (s)."""
    first = launch(command(run, data, out), out, out.parent / f"{out.name}.log", None, 0.0)
    if first["rc"] != 0:
        raise SystemExit(f"the uninterrupted {run} run failed: see {out.parent / (out.name + '.log')}")
    return outcome(out), first["wall_s"]


def same_outcome(out: Path, reference: tuple[dict, dict]) -> dict:
    weights, figures = outcome(out)
    ref_weights, ref_figures = reference
    max_diff = max((weights[k] - ref_weights[k]).abs().max().item() for k in ref_weights)
    identical = weights.keys() == ref_weights.keys() and all(
        torch.equal(weights[k], ref_weights[k]) for k in ref_weights
    )
    differing = [name for name in ref_figures if figures[name] != ref_figures[name]]
    return {"weights_identical": identical, "weights_max_abs_diff": max_diff, "metrics_identical": not differing,
            "differing_files": differing, "metrics_entries": len(figures[METRICS_FILE])}  # fmt: skip


def trial(
    run: str,
    data: Path,
    out: Path,
    reference: tuple,
    ref_wall: float,
    kills: int,
    rng: random.Random,
    kinds: tuple[str, ...] = KINDS,
) -> dict:
    """Kill the run `kills` times (each a kill of `kinds`), rerun until it finishes, rerun once more;
    compare with the reference."""
    cmd, log = command(run, data, out), out.parent / f"{out.name}.log"
    launches = []
    for i in range(kills + 1):
        kill = None if i == kills else rng.choice(kinds)
        kill_at, nth_write = rng.uniform(0.2, 0.7) * ref_wall, rng.randint(1, 2)
        if kill == "step":
            nth_write = rng.randint(1, len(reference[1][METRICS_FILE]))
        launches.append(launch(cmd, out, log, kill, kill_at, nth_write))
        if launches[-1]["killed"] is None:  # finished (or failed) before its kill
            break
    finished = launches[-1]
    result = {"run": run, "launches": launches, "finished_rc": finished["rc"]}
    if finished["rc"] != 0:
        return result | {"identical": False}
    before = {name: (out / name).read_bytes() for name in FINAL_FILES}
    rerun = launch(cmd, out, log, None, 0.0)
    unchanged = rerun["rc"] == 0 and all((out / n).read_bytes() == b for n, b in before.items())
    comparison = same_outcome(out, reference)
    identical = comparison["weights_identical"] and comparison["metrics_identical"]
    return (
        result
        | comparison
        | {
            "rerun_after_finish": rerun["log"],
            "rerun_after_finish_unchanged": unchanged,
            "identical": identical and unchanged,
        }
    )


SHORT = {"random": "rand", "checkpoint": "ckpt", "step": "step"}


def markdown(results: dict) -> str:
    t = results["totals"]
    lines = [
        f"Crash test (`{results['command']}`): {t['kills']} SIGKILLs ({t['kills_during_checkpoint_write']} while a "
        f"checkpoint was being written, {t['torn_checkpoints_left']} left a torn staging folder), "
        f"{t['resumes']} reruns of the same command, {t['identical']}/{t['trials']} trials ending with weights "
        "and reported figures identical to the uninterrupted run (and unchanged by one more rerun).",
        "",
        "| trial | run | launches | kills (at s: random / during checkpoint write / after a step) | torn checkpoints "
        "| weights identical | figures identical | rerun after finish unchanged |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(results["trials"], 1):
        kills = [launch for launch in r["launches"] if launch["killed"]]
        described = ", ".join(f"{k['at_s']} {SHORT[k['killed']]}" for k in kills)
        torn = ", ".join(k["torn_checkpoint"] for k in kills if k["torn_checkpoint"]) or "-"
        described = described or "none (finished before its planned kill)"
        lines.append(f"| {i} | {r['run']} | {len(r['launches'])} | {described} | {torn} | {r.get('weights_identical')} "
                     f"| {r.get('metrics_identical')} | {r.get('rerun_after_finish_unchanged')} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--kills", type=int, default=24, help="stop after the trial that reaches this many kills"
    )
    parser.add_argument("--kills_per_trial", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill schedule")
    parser.add_argument(
        "--work_dir", default="outputs/crash_test", help="run folders and logs (deleted first)"
    )
    parser.add_argument(
        "--keep_runs",
        action="store_true",
        help="keep the run folders (about 2 GB of checkpoints), not only logs",
    )
    parser.add_argument("--out", default="benchmarks/results/crash_test/v2", help="results.json and table.md")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    random.seed(args.seed)  # the delays into checkpoint writes
    work = (REPO_ROOT / args.work_dir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    records = json.loads(workload_path("sql", "train").read_text())
    data, references, ref_walls = {}, {}, {}
    for run, n in RECORDS.items():
        data[run] = work / f"{run}_data.json"
        data[run].write_text(json.dumps(records[:n]))
        references[run], ref_walls[run] = reference(run, data[run], work / f"{run}_reference")
        print(f"[crash_test] {run} reference: {ref_walls[run]} s", file=sys.stderr)
    trials: list[dict] = []
    while sum(len([x for x in t["launches"] if x["killed"]]) for t in trials) < args.kills:
        run = list(RUNS)[len(trials) % len(RUNS)]
        out = work / f"{run}_trial{len(trials) + 1}"
        trials.append(trial(run, data[run], out, references[run], ref_walls[run], args.kills_per_trial, rng))
        print(
            f"[crash_test] trial {len(trials)} ({run}): identical={trials[-1]['identical']}", file=sys.stderr
        )
    kills = [x for t in trials for x in t["launches"] if x["killed"]]
    results = {
        "command": shlex.join(["python", "-m", "benchmarks.crash_test", *(sys.argv[1:] if argv is None else argv)]),
        "pair": [str(TINY_TEACHER_PATH), str(TINY_DRAFT_PATH)],
        "train_commands": {run: shlex.join(["python", *command(run, data[run], work / f"{run}_trialN")[1:]]) for run in RUNS},
        "reference_wall_s": ref_walls,
        "totals": {
            "trials": len(trials),
            "kills": len(kills),
            "kills_during_checkpoint_write": sum(k["killed"] == "checkpoint" for k in kills),
            "torn_checkpoints_left": sum(k["torn_checkpoint"] is not None for k in kills),
            "resumes": sum(len(t["launches"]) - 1 for t in trials),
            "identical": sum(t["identical"] for t in trials),
        },
        "trials": trials,
    }  # fmt: skip
    results = json.loads(json.dumps(repo_relative(results)).replace(f"{REPO_ROOT}/", ""))
    out = REPO_ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "table.md").write_text(markdown(results))
    if not args.keep_runs:
        for folder in (p for p in work.iterdir() if p.is_dir()):
            shutil.rmtree(folder)
    print(markdown(results))
    return results


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks.crash_test"))
