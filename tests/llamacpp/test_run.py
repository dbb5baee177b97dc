"""llamacpp_patches/run.py's argv for llama-osd-stream: a sub-vocabulary draft's token set travels as
--osd-draft-vocab FILE (what the example reads), and a full-head draft adds nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llamacpp_patches.run import StreamArgs, draft_vocab_file


def _args(tmp_path: Path, draft_folder: Path | None) -> StreamArgs:
    binary = tmp_path / "llama-osd-stream"
    binary.touch()
    return StreamArgs(
        target_gguf="t.gguf", draft_gguf="d.gguf", tokenizer_path="tok", data_path=["q.json"], label="standard",
        binary=str(binary), draft_vocab_from=None if draft_folder is None else str(draft_folder),
    )  # fmt: skip


@pytest.mark.parametrize("config", [{"vocab_size": 50}, {"vocab_size": 50, "draft_vocab": []}, None])
def test_a_full_head_draft_adds_no_flag(tmp_path: Path, config: dict | None) -> None:
    folder = None
    if config is not None:
        folder = tmp_path / "draft"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config))
    assert draft_vocab_file(_args(tmp_path, folder), tmp_path) == []


def test_the_token_set_is_written_for_the_example(tmp_path: Path) -> None:
    folder = tmp_path / "draft"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"vocab_size": 50, "draft_vocab": [0, 3, 7, 41]}))
    flag, path = draft_vocab_file(_args(tmp_path, folder), tmp_path)
    assert flag == "--osd-draft-vocab" and Path(path).name == "standard_draft_vocab.json"
    assert json.loads(Path(path).read_text()) == [0, 3, 7, 41]
