"""`python -m osd.serving`: documented without vLLM installed, flags validated before anything loads."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

import pytest

from osd.datafiles import DataFileError
from osd.paths import TINY_DRAFT_PATH, TINY_TEACHER_PATH
from osd.serving.config import ServingArguments
from tests.tiny_models import tiny_tokenizer


@pytest.mark.slow
def test_help_documents_the_loop_without_importing_vllm() -> None:
    probe = "import sys, runpy; sys.argv = ['osd.serving', '--help']\ntry:\n    runpy.run_module('osd.serving', run_name='__main__')\nexcept SystemExit:\n    pass\nprint('vllm' in sys.modules)"  # fmt: skip
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert "--online_update_interval" in out and "--concurrency" in out and "metrics.jsonl" in out
    assert out.strip().endswith("False"), "--help imported vLLM"


@pytest.mark.parametrize(
    "flags, message",
    [({"kl_method": "l2"}, "--kl_method"), ({"concurrency": 0}, "--concurrency must be >= 1"),
     ({"online_loss_positions": "some"}, "--online_loss_positions"), ({"teacher_dtype": "int8"}, "--teacher_dtype"),
     ({"drafter": "head", "online_rejected_weight": 0.5}, "--online_rejected_weight: vLLM does not report")],
)  # fmt: skip
def test_bad_flags_are_refused_with_their_name(flags, message) -> None:
    with pytest.raises(ValueError, match=message):
        ServingArguments(data_path="stream.json", output_dir="out", **flags)


def test_standard_and_target_only_runs_do_not_distil() -> None:
    assert not ServingArguments(data_path="s", output_dir="o", online_update_interval=0).distils
    assert not ServingArguments(data_path="s", output_dir="o", max_propose_num=0).distils
    assert ServingArguments(data_path="s", output_dir="o").distils


@pytest.mark.slow
def test_serving_without_vllm_says_how_to_get_it(tmp_path) -> None:
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    argv = ["--data_path", str(tmp_path / "stream.json"), "--output_dir", str(tmp_path / "out")]
    run = subprocess.run([sys.executable, "-m", "osd.serving", *argv], capture_output=True, text=True)
    assert run.returncode == 1 and "setup_vllm.sh" in run.stderr and "Traceback" not in run.stderr, run.stderr


def test_max_samples_below_one_is_refused_before_anything_starts() -> None:
    for bad in (0, -1):
        with pytest.raises(ValueError, match="--max_samples must be >= 1"):
            ServingArguments(data_path="d.json", output_dir="o", max_samples=bad)


def test_the_output_folder_is_never_an_input_nor_a_folder_another_tool_wrote(tmp_path) -> None:
    from osd.serving.__main__ import main

    draft = tmp_path / "draft_in"
    draft.mkdir()
    (draft / "config.json").write_text("{}")
    with pytest.raises(DataFileError, match="--output_dir .* is the input folder"):
        main(["--data_path", "d.json", "--output_dir", str(draft), "--student_model_path", str(draft)])
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(DataFileError, match="holds files osd.serving did not write"):
        main(["--data_path", "d.json", "--output_dir", str(other)])
    assert (other / "notes.txt").read_text() == "mine" and (draft / "config.json").exists()


def test_a_draft_of_another_tokenizer_is_refused_before_the_output_folder(tmp_path) -> None:
    """Issue 49 (rule 2): vLLM was handed a draft whose token ids mean other tokens."""
    from osd.serving.__main__ import main

    draft = tmp_path / "draft"
    shutil.copytree(TINY_DRAFT_PATH, draft)
    tiny_tokenizer(["<pad>", "<s>", "</s>", "<unk>", "select"]).save_pretrained(draft)
    argv = ["--data_path", "d.json", "--output_dir", str(tmp_path / "out"), "--teacher_model_path",
            str(TINY_TEACHER_PATH), "--student_model_path", str(draft)]  # fmt: skip
    with pytest.raises(
        ValueError, match=f"draft {draft} and target {TINY_TEACHER_PATH} have different tokenizers"
    ):
        main(argv)
    assert not (tmp_path / "out").exists()
