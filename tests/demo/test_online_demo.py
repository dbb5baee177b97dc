"""The main job's entry point end to end, on the tiny pair (the default pair takes minutes)."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from osd.conversations import load_conversations, record_groups
from osd.cost_model import query_time, speedup_measured_verify
from osd.demo.online_demo import main, parse_args
from osd.demo.report import print_costs
from osd.metric_keys import group_key, wandb_key
from osd.paths import DOMAINS, TINY_DRAFT_PATH, TINY_TEACHER_PATH, repo_relative
from osd.spec.eagle3 import Eagle3Head, load_head, save_head
from osd.spec.serving_choice import available_layouts
from tests.wandb_offline import (
    history,
    offline_runs,
    offline_wandb,
    read_run,
    run_config,
    run_name,
    run_records,
    step_metrics,
)


def test_online_demo_serves_distils_and_reports_alpha_and_latency(tmp_path, capsys):
    out = tmp_path / "demo"
    summary = main(["--target", str(TINY_TEACHER_PATH), "--draft", str(TINY_DRAFT_PATH), "--dtype", "float32",
                    "--draft_dtype", "bfloat16", "--per_domain", "3", "--tail", "2", "--max_new_tokens", "8",
                    "--output_dir", str(out)])  # fmt: skip
    assert [r["domain"] for r in summary["domains"]] == list(DOMAINS)
    assert summary["updates"] == 3 * len(DOMAINS)
    serving = summary["serving"]  # the start-up choice: --dtype float32 forces the weight-major layout
    assert serving["layout"] == "weight_major" and serving["baseline"] in serving["pass_ms"]
    # adaptive gamma may decode a tail without proposals (no alpha) where none pays
    for row in summary["domains"]:
        online_alpha = row["online"]["alpha"]
        assert len(row["queries"]) == 2 and (online_alpha is None or 0.0 <= online_alpha <= 1.0)
        assert 0.0 <= row["standard"]["alpha"] <= 1.0
        # greedy: both speculative runs emit the target's tokens (tiny fp32 target: no near-ties), and so does
        # the target alone when it decodes in the same configuration
        assert row["standard"]["sd_tokens"] == row["online"]["tokens"]
        if serving["baseline"] == serving["layout"]:
            assert row["standard"]["target_tokens"] == row["online"]["tokens"]
    printed = capsys.readouterr().out
    assert "latency on the same queries" in printed and "all" in printed
    costs = summary["costs"]  # this machine's: Eq. 2 with them, at the tails' mean alphas
    assert (
        costs["c"] > 0
        and costs["verify_cost"] > 0
        and f"costs {costs['verify_cost']:.2f} target steps" in printed
    )
    standard_alpha = sum(r["standard"]["alpha"] for r in summary["domains"]) / len(DOMAINS)
    # Standard SD at the start-up choice's gamma; the online draft's gamma adaptive (no --gamma), its Eq. 2 at the
    # fixed gamma it predicts fastest at the online alpha, over the measured passes
    gamma = serving["gamma"]
    assert summary["gammas"] == {"standard": gamma, "online": "auto"} and summary["args"]["gamma"] is None
    assert (
        costs["standard_gamma"] == gamma
        and 1 <= costs["gamma"] <= len(serving["pass_ms"][serving["layout"]]) - 1
    )
    assert "(online SD's adaptive gamma: Eq. 2 at gamma" in printed and "online SD adaptive" in printed
    alphas = [r["online"]["alpha"] for r in summary["domains"] if r["online"]["alpha"] is not None]
    if alphas:
        online_alpha = sum(alphas) / len(alphas)
        eq2 = speedup_measured_verify(online_alpha, costs["gamma"], costs["c"], costs["verify_cost"])
        assert costs["eq2_online"] == pytest.approx(eq2 * costs["baseline_step"])
    c, verify = costs["standard_c"], costs["standard_verify_cost"]
    assert costs["eq2_standard"] == pytest.approx(
        speedup_measured_verify(standard_alpha, gamma, c, verify) * costs["baseline_step"]
    )
    tokens = sum(r["standard"]["target_tokens"] for r in summary["domains"]) / (2 * len(DOMAINS))
    alone = costs["baseline_prefill"] + tokens * costs["baseline_step"]
    served = query_time(standard_alpha, gamma, c, verify, tokens, costs["prefill"])
    assert costs["prefill_eq2_standard"] == pytest.approx(alone / served) and costs["prefill"] > 0
    assert (out / "alpha.png").stat().st_size > 0 and (out / "draft" / "config.json").exists()
    written = json.loads((out / "summary.json").read_text())
    assert written["machine"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert (
        written["args"]["draft_serving_dtype"] == "bfloat16"
        and written["command"].startswith(
            "python -m osd.demo.online_demo --target osd/demo/models/tiny/teacher "  # given whole: no machine path
        )
    )


def test_online_demo_with_a_head_serves_distils_and_saves_it(tmp_path):
    """--drafter head on the tiny pair: a fresh EAGLE-3 head (its bf16 copy) serves every query and learns from it,
    each domain's block and the final head are saved in the speculators format, and the report times the head."""
    out = tmp_path / "demo"
    summary = main(["--target", str(TINY_TEACHER_PATH), "--drafter", "head", "--dtype", "float32", "--domains", "sql",
                    "code", "--per_domain", "2", "--tail", "1", "--max_new_tokens", "8", "--output_dir", str(out)])  # fmt: skip
    assert summary["updates"] == 4 and summary["args"]["drafter"] == "head"
    for row in summary["domains"]:
        # greedy: the head's online SD, Standard SD and the target alone emit the same tokens
        assert row["standard"]["sd_tokens"] == row["standard"]["target_tokens"] == row["online"]["tokens"]
    assert summary["costs"]["c"] > 0  # a step of the head's chain, timed
    for folder in (out / "draft", out / "drafts" / "sql", out / "drafts" / "code"):
        assert load_head(folder).target_layers == (1, 2, 3)


def test_compare_head_serves_the_same_stream_with_a_head_beside_the_draft_model(tmp_path, capsys):
    """--compare_head: after the draft model, the head serves the same stream on the same start-up choice; its tails
    are the same queries, the target alone is timed again beside it, and each drafter has its tables and outputs."""
    head_path = tmp_path / "head_in"
    save_head(Eagle3Head.for_target(AutoModelForCausalLM.from_pretrained(TINY_TEACHER_PATH)), head_path)
    out = tmp_path / "demo"
    summary = main(["--target", str(TINY_TEACHER_PATH), "--draft", str(TINY_DRAFT_PATH), "--dtype", "float32",
                    "--domains", "sql", "code", "--per_domain", "2", "--tail", "1", "--max_new_tokens", "8",
                    "--compare_head", str(head_path), "--head_learning_rate", "1e-3", "--head_replay_queries", "4",
                    "--online_replay_queries", "0", "--output_dir", str(out)])  # fmt: skip
    head = summary["head"]
    assert head["head_path"].endswith("head_in") and head["updates"] == summary["updates"] == 4
    peaks = {name: [e["buffer_peak_mb"] for e in map(json.loads, (folder / "metrics.jsonl").open())
                    if "buffer_peak_mb" in e] for name, folder in (("model", out), ("head", out / "head"))}  # fmt: skip
    # the head's buffer keeps --head_replay_queries (4) recent queries: its peak grows with each one served; the
    # draft model's (the paper's buffer, emptied at each update) holds one query at a time
    assert peaks["head"][-1] > 3 * peaks["head"][0] and peaks["model"][-1] < 1.5 * peaks["model"][0]
    for model_row, head_row in zip(summary["domains"], head["domains"], strict=True):
        assert model_row["queries"] == head_row["queries"]
        # the target alone, timed again beside the head's pass: the same tokens, its own seconds
        assert head_row["standard"]["target_tokens"] == model_row["standard"]["target_tokens"]
        assert head_row["standard"]["target_s"] != model_row["standard"]["target_s"]
        # greedy: the head's Standard SD and online SD emit the target's tokens
        assert (
            head_row["standard"]["sd_tokens"] == head_row["online"]["tokens"] == model_row["online"]["tokens"]
        )
    assert head["costs"]["c"] != summary["costs"]["c"] > 0  # each drafter's step, timed
    assert load_head(out / "head" / "draft").target_layers == (1, 2, 3)
    assert (out / "head" / "alpha.png").stat().st_size > 0 and (out / "draft" / "config.json").exists()
    printed = capsys.readouterr().out
    assert "=== EAGLE-3 head (--compare_head, the same stream) ===" in printed
    assert "side by side, all domains' tails" in printed


@pytest.mark.slow
def test_compare_head_logs_each_drafter_to_a_wandb_run_of_its_own(tmp_path):
    """HF's WandbCallback logs into a run left open: the head's run must not land in the draft model's."""
    head_path = tmp_path / "head_in"
    save_head(Eagle3Head.for_target(AutoModelForCausalLM.from_pretrained(TINY_TEACHER_PATH)), head_path)
    with offline_wandb(tmp_path):
        main(["--target", str(TINY_TEACHER_PATH), "--draft", str(TINY_DRAFT_PATH), "--dtype", "float32",
              "--domains", "sql", "code", "--per_domain", "2", "--tail", "1", "--max_new_tokens", "6",
              "--gamma", "3", "--compare_head", str(head_path), "--output_dir", str(tmp_path / "demo"),
              "--report_to", "wandb", "--run_name", "both"])  # fmt: skip
    runs = [read_run(run) for run in offline_runs(tmp_path)]
    assert [run_name(records) for records in runs] == ["both", "both-head"]
    for records in runs:  # each run: one entry per query served
        served = [row["train/queries_served"] for row in history(records) if "train/alpha" in row]
        assert served == [1, 2, 3, 4]


def test_a_ceiling_that_is_not_there_is_refused_before_serving(tmp_path, capsys):
    for flag in ("--ceiling", "--head_ceiling"):
        with pytest.raises(SystemExit):
            parse_args([flag, str(tmp_path / "missing.json")])
        assert f"{flag} {tmp_path / 'missing.json'}: no such file or folder" in capsys.readouterr().err


def test_compare_head_is_refused_beside_a_head_drafter(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--drafter", "head", "--compare_head", "h"])
    assert "--compare_head serves a head beside the draft model" in capsys.readouterr().err


@pytest.mark.slow
def test_online_demo_logs_hierarchical_metrics_and_config_to_wandb(tmp_path):
    """--report_to wandb, offline: the run (read back from its own files) carries every group of the stream
    under alpha/{field}/{value}, plotted over queries served, and the models, data and stream in its config."""
    out = tmp_path / "demo"
    with offline_wandb(tmp_path):
        main(["--target", str(TINY_TEACHER_PATH), "--draft", str(TINY_DRAFT_PATH), "--dtype", "float32",
              "--draft_dtype", "float32", "--domains", "sql", "code", "--per_domain", "2", "--tail", "1",
              "--max_new_tokens", "6", "--gamma", "3", "--output_dir", str(out), "--report_to", "wandb"])  # fmt: skip
    records = run_records(tmp_path)
    stream = load_conversations(out / "stream.json")
    rows = [row for row in history(records) if "train/alpha" in row]
    assert [row["train/queries_served"] for row in rows] == [1, 2, 3, 4]  # an entry per query
    # each query's entry holds exactly its own record's groups
    for row, record in zip(rows, stream, strict=True):
        groups = {k for k in row if k.startswith("train/alpha/")}
        assert groups == {wandb_key(group_key(f, v)) for f, v in record_groups(record).items()}
        assert {"language", "topic"} & set(record_groups(record)), "the workload's records carry topics"
    axes = step_metrics(records)
    assert all(axes[k] == "train/queries_served" for row in rows for k in row if k.startswith("train/alpha"))
    config = run_config(records)
    assert config["student_model_path"] == repo_relative(str(TINY_DRAFT_PATH))
    assert config["teacher_model_path"] == repo_relative(str(TINY_TEACHER_PATH))
    assert config["data_path"] == repo_relative(str(out / "stream.json"))
    assert (config["stream"], config["mode"], config["gamma"]) == ("abrupt-sql-code-x2", "online", 3)
    assert config["optim"] == "adamw_torch_fused"  # one pass over weights and moments: half the update
    assert run_name(records) == "online-forward-g3-draft-teacher-abrupt-sql-code-x2"


@pytest.mark.slow
def test_a_ceiling_recorded_on_the_same_stream_and_draft_is_drawn_and_tabled(tmp_path, capsys):
    from osd.analysis import online_replay, record

    pair = ["--target", str(TINY_TEACHER_PATH), "--draft", str(TINY_DRAFT_PATH), "--dtype", "float32",
            "--draft_dtype", "float32", "--domains", "sql", "code", "--per_domain", "3", "--max_new_tokens", "6",
            "--gamma", "3"]  # fmt: skip
    main(pair + ["--output_dir", str(tmp_path / "first"), "--ceiling", "none"])
    stream = tmp_path / "first" / "stream.json"
    record.main(["--target", str(TINY_TEACHER_PATH), "--conversations", str(stream), "--max_new_tokens", "6",
                 "--top_k", "8", "--output", str(tmp_path / "rec")])  # fmt: skip
    ceiling = tmp_path / "ceiling.json"
    online_replay.main(["--recording", str(tmp_path / "rec"), "--stream", str(stream), "--draft",
                        str(TINY_DRAFT_PATH), "--gamma", "3", "--offline_steps", "3", "--out", str(ceiling)])  # fmt: skip
    offline = json.loads(ceiling.read_text())["offline"]
    summary = main(pair + ["--output_dir", str(tmp_path / "second"), "--ceiling", str(ceiling)])
    assert {r["domain"]: r["ceiling"] for r in summary["domains"]} == offline
    costs = summary["costs"]  # Eq. 2 at the ceiling's mean alpha, with the run's costs
    mean = sum(offline.values()) / len(offline)
    assert costs["eq2_ceiling"] == pytest.approx(
        speedup_measured_verify(mean, 3, costs["c"], costs["verify_cost"]) * costs["baseline_step"]
    )
    printed = capsys.readouterr().out
    assert (
        "offline ceiling" in printed
        and f"at the offline ceiling's alphas: {costs['eq2_ceiling']:.2f}x" in printed
    )
    folder = tmp_path / "ceilings"  # one file per gamma: the one recorded at the run's gamma is drawn
    folder.mkdir()
    other_gamma = json.loads(ceiling.read_text()) | {"gamma": 2, "offline": dict.fromkeys(offline, 0.0)}
    (folder / "gamma2.json").write_text(json.dumps(other_gamma))
    (folder / "gamma3.json").write_text(ceiling.read_text())
    summary = main(pair + ["--output_dir", str(tmp_path / "folder"), "--ceiling", str(folder)])
    assert {r["domain"]: r["ceiling"] for r in summary["domains"]} == offline

    other = main(
        pair + ["--per_domain", "2", "--output_dir", str(tmp_path / "third"), "--ceiling", str(ceiling)]
    )
    assert all("ceiling" not in r for r in other["domains"])  # another stream: no line, a note
    assert "recorded with another stream; the plot has no ceiling line" in capsys.readouterr().out
    for flags, differ in (
        (["--gamma", "2"], "gamma"),
        (["--tail", "2"], "tail"),
        (["--max_new_tokens", "5"], "max_new_tokens"),
    ):
        other = main(pair + flags + ["--output_dir", str(tmp_path / differ), "--ceiling", str(ceiling)])
        assert all("ceiling" not in r for r in other["domains"])
        assert f"recorded with another {differ};" in capsys.readouterr().out


@pytest.mark.slow
def test_block_drafts_are_the_draft_as_it_stood_after_each_domain(tmp_path):
    """drafts/<domain>: with background updates (the update on a block's last query lands one step later),
    the sql draft of an sql -> code run equals the final draft of a run over the sql block alone, and the
    last block's draft is the final draft."""
    from safetensors.torch import load_file

    pair = [
        "--target",
        str(TINY_TEACHER_PATH),
        "--draft",
        str(TINY_DRAFT_PATH),
        "--dtype",
        "float32",
        "--draft_dtype",
        "float32",
        "--per_domain",
        "3",
        "--max_new_tokens",
        "6",
        "--ceiling",
        "none",
        "--gamma",
        "3",
    ]  # fmt: skip  (both runs distil the same proposals: gamma is not left to the timings)
    main(pair + ["--domains", "sql", "code", "--output_dir", str(tmp_path / "both")])
    main(pair + ["--domains", "sql", "--output_dir", str(tmp_path / "sql")])

    def weights(folder):
        return load_file(folder / "model.safetensors")

    def same(a, b):
        return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    both = tmp_path / "both"
    assert sorted(p.name for p in (both / "drafts").iterdir()) == ["code", "sql"]
    assert same(weights(both / "drafts" / "sql"), weights(tmp_path / "sql" / "draft"))
    assert same(weights(both / "drafts" / "code"), weights(both / "draft"))
    assert not same(weights(both / "drafts" / "sql"), weights(both / "draft"))
    assert not same(weights(both / "drafts" / "sql"), weights(TINY_DRAFT_PATH))


def test_the_costs_name_the_chosen_layouts_and_a_costly_verification_says_why_it_loses(capsys):
    costs = {"verify_cost": 2.3, "c": 0.05, "gamma": 3, "standard_gamma": 3, "eq2_standard": 0.6, "eq2_online": None,
             "baseline_step": 0.9, "prefill": 4.0, "baseline_prefill": 5.0, "prefill_eq2_standard": 0.7,
             "prefill_eq2_online": None, "prompt_tokens": 54, "reused_tokens": 28}  # fmt: skip
    info = {"cpu": "a CPU", "cpu_capability": "AVX2", "cpu_bf16_instructions": []}
    print_costs(costs, info, {"standard": 3, "online": 3}, "plain", "bf16_rows")
    printed = capsys.readouterr().out
    assert "serves as plain, alone as bf16_rows (0.90 of its steps)" in printed and "online SD -x" in printed
    prefill = "(4.0 steps served, 5.0 alone, 28 of a mean prompt's 54 tokens taken from the one before)"
    assert f"{prefill}: 0.70x and -x" in printed
    assert "compute-bound" in printed and "for Standard SD" not in printed
    standard = {"standard_gamma": 1, "standard_verify_cost": 1.05, "standard_c": 0.04}
    gammas = {"standard": 1, "online": "auto"}
    print_costs(costs | standard | {"verify_cost": 1.1}, info, gammas, "bf16_rows", "bf16_rows")
    printed = capsys.readouterr().out
    assert "compute-bound" not in printed and "verifying 4 tokens costs 1.10" in printed
    assert "(online SD's adaptive gamma: Eq. 2 at gamma 3, the best fixed one at its alpha)" in printed
    assert "(2 tokens: 1.05, a draft step 0.040, for Standard SD)" in printed


@pytest.mark.slow
@pytest.mark.parametrize("layout", [name for name in available_layouts("bfloat16") if name != "plain"])
def test_a_forced_bf16_layout_serves_the_same_tokens_as_plain_bf16(tmp_path, layout):
    """--linears packed / bf16_rows on a bf16 tiny pair: the start-up choice keeps the forced layout and gamma,
    and the run's alphas and target-alone tokens equal those of plain bf16 (the products are the same)."""
    flags = ["--target", str(TINY_TEACHER_PATH), "--draft", str(TINY_DRAFT_PATH), "--per_domain", "2", "--tail", "1",
             "--max_new_tokens", "8", "--domains", "sql", "code", "--gamma", "3", "--dtype", "bfloat16"]  # fmt: skip
    plain = main([*flags, "--linears", "plain", "--output_dir", str(tmp_path / "plain")])
    other = main([*flags, "--linears", layout, "--output_dir", str(tmp_path / layout)])
    assert (plain["serving"]["layout"], other["serving"]["layout"]) == ("plain", layout)
    assert other["serving"]["gamma"] == 3 and set(other["serving"]["pass_ms"]) == set(available_layouts())
    for a, b in zip(plain["domains"], other["domains"], strict=True):
        assert (a["standard"]["alpha"], a["online"]["alpha"]) == (
            b["standard"]["alpha"],
            b["online"]["alpha"],
        )


def test_a_layout_of_another_dtype_is_refused_naming_both_flags(capsys):
    with pytest.raises(SystemExit):
        main(["--linears", "plain", "--dtype", "float32", "--output_dir", "unused"])
    assert "no serving layout for --dtype float32 --linears plain" in capsys.readouterr().err


def test_the_main_job_deletes_nothing_it_did_not_write_and_refuses_a_folder_in_use(tmp_path):
    """Refused before any model loads: a folder with someone's files, and a folder another run holds."""
    from osd.datafiles import DataFileError
    from osd.distill.run_dir import RunDirError, lock_run_dir

    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    (mine / "sub").mkdir()
    with pytest.raises(DataFileError, match="holds files osd.demo.online_demo did not write"):
        main(["--output_dir", str(mine)])
    assert (mine / "notes.txt").read_text() == "mine" and (mine / "sub").is_dir()
    with lock_run_dir(tmp_path / "busy"), pytest.raises(RunDirError, match="in use by a running run"):
        main(["--output_dir", str(tmp_path / "busy")])
    with pytest.raises(DataFileError, match="inside the input folder"):
        main(["--draft", str(TINY_DRAFT_PATH), "--output_dir", str(TINY_DRAFT_PATH / "out")])
    assert not (TINY_DRAFT_PATH / "out").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal needs a machine without CUDA")
def test_device_cuda_without_a_gpu_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args(["--device", "cuda"])
    assert exited.value.code == 2 and "--device cuda: torch sees no CUDA device" in capsys.readouterr().err
