"""llamacpp_patches.check_hf: token ids that the model does not embed are refused naming the file,
query and position, before any generation (they raised IndexError inside the embedding)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from llamacpp_patches import check_hf
from osd.paths import TINY_TEACHER_PATH
from osd.user_errors import run_main

VOCAB = 3072  # the tiny teacher's embedding rows


def stream_file(path: Path, prompt_ids: list, output_ids: list) -> Path:
    """One baseline line of llama-osd-stream with --osd-dump-ids."""
    line = {"id": "q0", "mode": "baseline", "model": "teacher.gguf", "gamma": 0, "decode_ms": 1.0, "steps": 3,
            "drafted": 0, "accepted": 0, "generated_tokens": len(output_ids), "prompt_ids": prompt_ids,
            "output_ids": output_ids}  # fmt: skip
    path.write_text(json.dumps(line) + "\n")
    return path


def test_the_teachers_own_greedy_output_is_identical(tmp_path, capsys):
    model = AutoModelForCausalLM.from_pretrained(TINY_TEACHER_PATH, dtype=torch.float32).eval()
    prompt = [1, 400, 500, 600]
    out = model.generate(torch.tensor([prompt]), max_new_tokens=3, do_sample=False)[0, 4:].tolist()
    result = check_hf.main(
        ["--model", str(TINY_TEACHER_PATH), str(stream_file(tmp_path / "s.jsonl", prompt, out))]
    )
    assert list(result.values()) == [None]


@pytest.mark.parametrize(
    ("prompt_ids", "output_ids", "message"),
    [
        ([1, 2, VOCAB], [5], f"prompt_ids[2] is {VOCAB}, not a token id of --model"),
        ([1, 2, 3], [5, -1], "output_ids[1] is -1, not a token id of --model"),
        ([1, 2.0, 3], [5], "prompt_ids[1] is 2.0, not a token id"),
        ([1, True], [5], "prompt_ids[1] is True, not a token id"),
        ([], [5], "prompt_ids is [], not a list of token ids"),
    ],
)
def test_ids_outside_the_vocabulary_are_one_error_line_naming_file_and_position(
    prompt_ids, output_ids, message, tmp_path, capsys
):
    path = stream_file(tmp_path / "s.jsonl", prompt_ids, output_ids)
    code = run_main(lambda: check_hf.main(["--model", str(TINY_TEACHER_PATH), str(path)]), "check_hf")
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert code == 1 and "Traceback" not in err, err
    assert last.startswith(f"check_hf: error: {path}, query q0: {message}"), last
    assert f"(0 to {VOCAB - 1})" in last or "not a list" in last
