"""benchmarks/chain_agreement.py: the target as its own draft agrees at every step; a head is scored per chain step
from the recorded states, and a recording without them is refused for a head."""

from __future__ import annotations

import pytest

from benchmarks.chain_agreement import main
from osd.spec.eagle3 import Eagle3Head, save_head
from tests.tiny_models import recorded_tiny_target


def test_the_target_as_draft_agrees_everywhere_and_a_head_is_scored_per_step(tmp_path):
    target, recording = recorded_tiny_target(12, layers=4, features=True)
    recording.save(tmp_path / "rec")
    target.save_pretrained(tmp_path / "target")
    save_head(Eagle3Head.for_target(target), tmp_path / "head")
    result = main(["--drafters", str(tmp_path / "target"), str(tmp_path / "head"), "--recordings",
                   str(tmp_path / "rec"), "--target", str(tmp_path / "target"), "--steps", "3",
                   "--out", str(tmp_path / "agreement.json")])  # fmt: skip
    table = result["agreement"]
    assert table[str(tmp_path / "target")]["rec"] == [1.0, 1.0, 1.0]  # greedy float32: its own tokens
    head = table[str(tmp_path / "head")]["rec"]
    assert len(head) == 3 and all(0 <= a < 1 for a in head)  # a random head: far from the target
    assert (tmp_path / "agreement.json").exists()


def test_a_head_needs_the_recorded_states(tmp_path):
    target, recording = recorded_tiny_target(6, layers=4)
    recording.save(tmp_path / "rec")
    target.save_pretrained(tmp_path / "target")
    save_head(Eagle3Head.for_target(target), tmp_path / "head")
    with pytest.raises(ValueError, match="record with --features to score a head"):
        main(["--drafters", str(tmp_path / "head"), "--recordings", str(tmp_path / "rec"), "--target",
              str(tmp_path / "target")])  # fmt: skip
