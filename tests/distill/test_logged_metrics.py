"""What a real tiny online run with evaluation logs (metrics.jsonl and an offline wandb run), against the
dashboard's panels (osd.dashboard) and the one naming scheme of online and eval metrics (osd.metric_keys)."""

from __future__ import annotations

import json
import re

import pytest
from distill_fixtures import QUERIES, llama, save_pair

from osd.dashboard import build_workspace, sections, spec_json
from osd.distill.callbacks import default_run_name, read_metrics
from osd.metric_keys import EVAL_PREFIX, GROUP_KEY, group_key, wandb_key
from osd.train import main
from tests.tiny_models import draft_from_target
from tests.wandb_offline import history, offline_wandb, run_config, run_name, run_records, step_metrics

# (query, dataset, topic, language): random tiny models are right on some queries, wrong on others
STREAM = [(QUERIES[0], "math", "arithmetic", "en"), (QUERIES[1], "sql", "tables", "sql"),
          (QUERIES[2], "math", "arithmetic", "en"), (QUERIES[4], "chat", "sums", "en")]  # fmt: skip


def teacher_or_noisy_copy(layers: int, width: int, seed: int):
    """save_pair's builder: the teacher (2 layers), and for the student the same teacher plus noise (a
    random student agrees with a random teacher on the same positions of every prompt: one alpha for all)."""
    teacher = llama(2, 32, seed=0)
    return draft_from_target(teacher, 0.3) if layers == 1 else teacher


@pytest.fixture(scope="module")
def online_run(tmp_path_factory):
    """An online run (4 queries, lr 0: the draft never changes) whose eval set is its stream, measured
    before the first query (eval_on_start); one online log entry covers the whole stream. Logged to
    metrics.jsonl and to an offline wandb run. Returns (metrics.jsonl entries, wandb records, data path)."""
    tmp = tmp_path_factory.mktemp("online_run")
    student, teacher = save_pair(tmp, teacher_or_noisy_copy)
    records = [{"id": f"q{i}", "conversation": [{"role": "user", "content": q}], "dataset": d, "topic": t,
                "language": lang} for i, (q, d, t, lang) in enumerate(STREAM)]  # fmt: skip
    data = tmp / "stream.json"
    data.write_text(json.dumps(records))
    argv = [
        "--student_model_path", student, "--teacher_model_path", teacher, "--data_path", str(data),
        "--eval_data_path", str(data), "--output_dir", str(tmp / "run"), "--mode", "online",
        "--report_to", "wandb", "--max_new_tokens", "12", "--max_propose_num", "2", "--learning_rate", "0",
        "--num_train_epochs", "1", "--per_device_train_batch_size", "1", "--online_update_interval", "2",
        "--online_eval_interval", "4", "--save_strategy", "no", "--logging_steps", "1", "--disable_tqdm", "True",
    ]  # fmt: skip
    with offline_wandb(tmp):
        main(argv)
    return read_metrics(tmp / "run"), run_records(tmp), str(data)


def test_dashboard_panels_name_only_keys_the_trainer_logs(online_run):
    entries, records, _ = online_run
    # the online and eval entries of metrics.jsonl, as WandbCallback names them
    logged = {
        wandb_key(k) for e in entries if "alpha_window" in e or "eval_alpha" in e for k in e if k != "step"
    }
    on_wandb = {k for row in history(records) for k in row}
    assert logged <= on_wandb
    # the built definition itself (what saving sends), not the list it was built from
    spec = json.loads(spec_json(build_workspace("entity", "project")))
    panels = [p["config"] for s in spec["section"]["panelBankConfig"]["sections"] for p in s["panels"]]
    assert len(panels) == sum(len(section) for section in sections().values())
    for panel in panels:
        assert panel["xAxis"] in on_wandb, panel
        for key in panel["metrics"]:
            assert key in logged and key in on_wandb, (panel["chartTitle"], key)
        if "metricRegex" in panel:
            matched = [k for k in logged if re.match(panel["metricRegex"], k)]
            assert matched and set(matched) <= on_wandb, (panel["chartTitle"], panel["metricRegex"])
        assert panel["metrics"] or panel.get("metricRegex"), panel


def test_eval_and_online_name_and_measure_each_group_alike(online_run):
    entries, _, data = online_run
    (standard,) = [e for e in entries if "eval_alpha" in e]
    (online,) = [e for e in entries if "alpha_window" in e]
    eval_groups = {
        k.removeprefix(EVAL_PREFIX): v
        for k, v in standard.items()
        if GROUP_KEY.match(k.removeprefix(EVAL_PREFIX))
    }
    online_groups = {k: v for k, v in online.items() if GROUP_KEY.match(k)}
    # every value of every field in the stream, under one name, in both
    expected = {
        group_key(f, r[f]) for r in json.loads(open(data).read()) for f in ("dataset", "topic", "language")
    }
    assert set(eval_groups) == set(online_groups) == expected
    # lr 0: the online draft is the evaluated one, serving the same prompts greedily: the same alphas
    for key, value in eval_groups.items():
        assert online_groups[key] == pytest.approx(value, rel=1e-5), key
    assert len(set(online_groups.values())) > 1, "the groups must differ, or a mix-up would go unseen"


def test_wandb_run_has_config_name_and_queries_served_axis(online_run):
    entries, records, data = online_run
    config = run_config(records)
    assert config["data_path"] == config["eval_data_path"] == config["stream"] == data
    assert config["student_model_path"].endswith("student") and config["teacher_model_path"].endswith(
        "teacher"
    )
    assert (config["mode"], config["kl_method"], config["gamma"]) == ("online", "forward", 2)
    assert run_name(records) == default_run_name(config) == "online-forward-g2-student-teacher-stream"
    axes = step_metrics(records)
    (online,) = [e for e in entries if "alpha_window" in e]
    for key in online:
        if key not in ("step", "epoch", "queries_served"):
            assert axes[wandb_key(key)] == "train/queries_served", key
    assert [row["train/queries_served"] for row in history(records) if "train/alpha" in row] == [4]
