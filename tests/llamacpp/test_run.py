"""llamacpp_patches/run.py: its argv for llama-osd-stream (a sub-vocabulary draft's token set travels as
--osd-draft-vocab FILE, what the example reads; a full-head draft adds nothing), and its errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gguf import GGUFWriter
from transformers import AutoTokenizer

from llamacpp_patches.run import StreamArgs, draft_vocab_file, main
from osd.paths import REPO_ROOT, TINY_TEACHER_PATH, workload_path


def _args(tmp_path: Path, draft_folder: Path | None) -> StreamArgs:
    for path in ("llama-osd-stream", "t.gguf", "d.gguf"):
        (tmp_path / path).touch()
    binary = tmp_path / "llama-osd-stream"
    return StreamArgs(
        target_gguf=str(tmp_path / "t.gguf"), draft_gguf=str(tmp_path / "d.gguf"), tokenizer_path="tok",
        data_path=["q.json"], label="standard",
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


@pytest.mark.parametrize("tool", ["run", "report", "check_hf"])
@pytest.mark.parametrize("form", ["script", "module"])
def test_help_works_as_a_script_and_as_a_module(tool, form, tmp_path):
    """Issue 49: `python llamacpp_patches/run.py --help` failed on its relative imports."""
    if form == "script":  # from another folder: the tool finds the repository itself
        command, cwd = [str(REPO_ROOT / "llamacpp_patches" / f"{tool}.py")], tmp_path
    else:
        command, cwd = ["-m", f"llamacpp_patches.{tool}"], REPO_ROOT
    env = {**os.environ, "PYTHONPATH": ""}
    done = subprocess.run([sys.executable, *command, "--help"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage:")


TINY_TOKENS = AutoTokenizer.from_pretrained(TINY_TEACHER_PATH).convert_ids_to_tokens(list(range(3072)))


def write_gguf(path: Path, tokens: list[str]) -> None:
    """A GGUF file holding a vocabulary and no tensors: what run.py reads of a model."""
    writer = GGUFWriter(str(path), "llama")
    writer.add_token_list(tokens)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture
def ready(tmp_path: Path) -> list[str]:
    """Flags of a run whose files all exist; its binary prints a message and exits with status 3."""
    binary = tmp_path / "llama-osd-stream"
    binary.write_text("#!/bin/sh\necho 'cannot load the model' >&2\nexit 3\n")
    binary.chmod(0o755)
    for name in ("t.gguf", "d.gguf"):
        write_gguf(tmp_path / name, TINY_TOKENS)
    return ["--target_gguf", str(tmp_path / "t.gguf"), "--draft_gguf", str(tmp_path / "d.gguf"),
            "--binary", str(binary), "--tokenizer_path", str(TINY_TEACHER_PATH),
            "--data_path", str(workload_path("sql", "eval")), "--limit", "1", "--out_dir", str(tmp_path / "out")]  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "message"),
    [(["--limit", "0"], "--limit must be >= 1, got 0"),
     (["--threads", "0"], "--threads must be >= 1, got 0"),
     (["--target_gguf", "missing.gguf"], "--target_gguf missing.gguf: no such file"),
     (["--extra_args", "'-ngl"], "--extra_args \"'-ngl\": No closing quotation"),
     (["--draft_vocab_from", "no_such_folder"], "--draft_vocab_from no_such_folder: no readable config.json"),
     (["--tokenizer_path", "no/such_tokenizer"], "no/such_tokenizer: cannot load its tokenizer"),
     (["--draft_gguf", "{empty}"], "--draft_gguf {empty}: not a readable GGUF file"),
     (["--target_gguf", "{shifted}"], "--tokenizer_path {tokenizer} and --target_gguf {shifted} have different "
      "vocabularies (3072 vs 3072 tokens; id 0 is "),
     (["--target_gguf", "{short}"], "(3072 vs 100 tokens; fewer ids)"),
     ([], "--binary {binary} exited with status 3 serving")],
)  # fmt: skip
def test_bad_input_is_a_user_error_naming_the_flag(ready, flags, message, tmp_path):
    """Issue 49 (rule 2): a GGUF of another vocabulary than --tokenizer_path's served other tokens."""
    paths = {"binary": ready[ready.index("--binary") + 1], "tokenizer": TINY_TEACHER_PATH}
    paths |= {name: tmp_path / f"{name}.gguf" for name in ("empty", "shifted", "short")}
    paths["empty"].touch()
    write_gguf(paths["shifted"], TINY_TOKENS[1:] + TINY_TOKENS[:1])
    write_gguf(paths["short"], TINY_TOKENS[:100])
    with pytest.raises((ValueError, OSError)) as error:
        main([*ready, *(flag.format(**paths) for flag in flags)])
    assert message.format(**paths) in str(error.value)


def test_an_output_that_is_an_input_is_refused(ready, tmp_path):
    queries = tmp_path / "out" / "x_queries.json"
    queries.parent.mkdir()
    queries.write_text(json.dumps(json.loads(workload_path("sql", "eval").read_text())[:1]))
    before = queries.read_bytes()
    with pytest.raises(ValueError, match="is the input file"):
        main([*ready, "--data_path", str(queries), "--label", "x"])
    assert queries.read_bytes() == before


def test_an_error_is_one_line_from_the_command_line(ready):
    env = {**os.environ, "PYTHONPATH": ""}
    done = subprocess.run([sys.executable, "-m", "llamacpp_patches.run", *ready], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1].startswith("llamacpp_patches.run: error: --binary ")


def test_outputs_are_written_only_over_the_tools_own(ready, tmp_path):
    """Issue 49 (rule 1): a file in --out_dir that the tool did not write stops the run before anything is
    written; its own queries file from a failed run is replaced by the next run."""
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="exited with status 3"):
        main([*ready, "--label", "x"])
    assert (out / "x_queries.json").is_file() and not (out / "x.jsonl").exists()
    assert not list(out.glob(".x.jsonl.partial"))  # the binary's own file goes with the failed run
    with pytest.raises(ValueError, match="exited with status 3"):  # its own file: replaced
        main([*ready, "--label", "x"])
    foreign = out / "x_summary.json"
    foreign.write_text("my notes\n")
    queries = (out / "x_queries.json").read_bytes()
    with pytest.raises(ValueError, match=r"x_summary.json exists and llamacpp_patches.run did not write it"):
        main([*ready, "--label", "x"])
    assert foreign.read_text() == "my notes\n" and (out / "x_queries.json").read_bytes() == queries
