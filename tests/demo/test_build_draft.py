"""The draft builder: seeded, and a run killed mid-way resumes to the same weights as an uninterrupted one."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

import osd.demo.lm_training as lm_training
from osd.demo import DOMAINS, TINY_TEACHER_PATH, workload_path
from osd.demo.build_draft import DraftBuildConfig, build


@pytest.fixture()
def small_workload(tmp_path):
    folder = tmp_path / "workload"
    folder.mkdir()
    for domain in DOMAINS:
        for split, n in (("train", 12), ("eval", 3)):
            records = json.loads(workload_path(domain, split).read_text())[:n]
            (folder / f"{domain}_{split}.json").write_text(json.dumps(records))
    return folder


def _config(workload, out) -> DraftBuildConfig:
    # the tiny teacher stands in for the target: the builder only reads its tokenizer and vocabulary size
    return DraftBuildConfig(out_dir=str(out), target=str(TINY_TEACHER_PATH), workload_dir=str(workload), hidden=32,
                            ffn=64, heads=2, max_positions=64, chunk_length=32, steps=6, batch_size=2,
                            warmup_steps=2, checkpoint_every=2, bf16_autocast=False)  # fmt: skip


def test_killed_build_resumes_to_the_uninterrupted_weights(small_workload, tmp_path, monkeypatch, capsys):
    build(_config(small_workload, tmp_path / "whole"))
    whole = load_file(tmp_path / "whole" / "model.safetensors")

    calls = {"n": 0}
    clip = torch.nn.utils.clip_grad_norm_

    def crash_at_step_3(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt("killed")
        return clip(*args, **kwargs)

    monkeypatch.setattr(lm_training.torch.nn.utils, "clip_grad_norm_", crash_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        build(_config(small_workload, tmp_path / "resumed"))
    assert not (tmp_path / "resumed").exists()  # nothing half-written where the draft goes
    assert (tmp_path / "resumed.build" / "state.pt").exists()
    monkeypatch.setattr(lm_training.torch.nn.utils, "clip_grad_norm_", clip)
    build(_config(small_workload, tmp_path / "resumed"))
    assert "resuming from" in capsys.readouterr().out
    resumed = load_file(tmp_path / "resumed" / "model.safetensors")
    assert whole.keys() == resumed.keys()
    for name in whole:
        torch.testing.assert_close(resumed[name], whole[name], rtol=0, atol=0)
    assert not (tmp_path / "resumed.build").exists()  # the checkpoint is removed once the draft is saved
    metrics = json.loads((tmp_path / "resumed" / "build_metrics.json").read_text())
    assert metrics["parameters"] == sum(t.numel() for t in whole.values())
