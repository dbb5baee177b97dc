"""Check llama.cpp's greedy outputs against Hugging Face greedy `generate` on the same prompt ids.

    python -m llamacpp_patches.check_hf --model osd/demo/models/target runs/llamacpp/demo/standard.jsonl

Reads the `mode=baseline` lines (written with `--osd-dump-ids`) of the given model's runs and prints,
per query, whether HF produced the same tokens and, if not, the first differing position and the gap
between HF's two largest logits there. Pass only runs whose `-m` GGUF was converted from --model
(in a `--osd-mode both` file the draft-only lines are skipped: their model is the draft).
llama.cpp's kernels and torch round differently, so a near tie (gap ~1e-3) may flip; a difference
at a large gap, or early in every query, points to a conversion or prompt problem.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# `python llamacpp_patches/check_hf.py`: the repository, not this folder, is the import root
if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, PreTrainedModel  # noqa: E402

from llamacpp_patches.report import load_lines  # noqa: E402
from osd.model_checks import load_pretrained  # noqa: E402
from osd.user_errors import run_main  # noqa: E402


@torch.no_grad()
def first_difference(model: PreTrainedModel, line: dict) -> tuple[int, float] | None:
    """(first generated position where HF greedy differs from the recorded output, HF's top-2 logit gap there)."""
    ids = torch.tensor([line["prompt_ids"]])  # [1, T]
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=line["generated_tokens"], do_sample=False
    )
    hf, cpp = out[0, ids.shape[1] :].tolist(), line["output_ids"]
    if hf == cpp:
        return None
    i = next((i for i, (a, b) in enumerate(zip(hf, cpp, strict=False)) if a != b), min(len(hf), len(cpp)))
    logits = model(out[:, : ids.shape[1] + i]).logits[0, -1]  # [V], predicts generated token i
    top = logits.topk(2).values
    return i, float(top[0] - top[1])


def check_token_ids(lines: list[dict], rows: int, model: str) -> None:
    """Raise naming the file, query and position of the first prompt or output id of `lines` that is not a
    token id `model` embeds (an integer from 0 to `rows` - 1), or of a line without prompt ids."""
    for line in lines:
        where = f"{line['file']}, query {line['id']}"
        for key in ("prompt_ids", "output_ids"):
            ids = line.get(key)
            if not isinstance(ids, list) or (key == "prompt_ids" and not ids):
                raise ValueError(f"{where}: {key} is {ids!r}, not a list of token ids")
            bad = next((i for i, t in enumerate(ids) if type(t) is not int or not 0 <= t < rows), None)
            if bad is not None:
                raise ValueError(
                    f"{where}: {key}[{bad}] is {ids[bad]!r}, not a token id of --model {model} (0 to {rows - 1}); "
                    "compare a run with the model its GGUF was converted from"
                )


def main(argv: list[str] | None = None) -> dict[str, tuple[int, float] | None]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="HF folder of the model the GGUF was converted from")
    parser.add_argument("files", nargs="+", help="llama-osd-stream outputs with --osd-dump-ids")
    args = parser.parse_args(argv)
    model = load_pretrained(AutoModelForCausalLM, args.model, "--model", dtype=torch.float32).eval()
    lines = [x for f in args.files for x in load_lines(f)]
    drafts = {(x["file"], x["draft_model"]) for x in lines if x["mode"] == "speculative"}
    lines = [
        x
        for x in lines
        if x["mode"] == "baseline" and "output_ids" in x and (x["file"], x["model"]) not in drafts
    ]
    if not lines:
        raise ValueError(
            f"{args.files}: no baseline lines with output_ids; run llama-osd-stream with --osd-dump-ids"
        )
    check_token_ids(lines, model.get_input_embeddings().num_embeddings, args.model)
    result = {f"{x['file']}:{x['id']}": first_difference(model, x) for x in lines}
    same = sum(d is None for d in result.values())
    print(f"{same}/{len(result)} queries identical to HF greedy")
    for key, d in result.items():
        if d is not None:
            print(f"  {key}: first difference at generated token {d[0]}, HF top-2 logit gap {d[1]:.2g}")
    return result


if __name__ == "__main__":
    raise SystemExit(run_main(main, "llamacpp_patches.check_hf"))
