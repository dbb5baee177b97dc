r"""Serve a conversation-JSON query stream with vLLM and the OSD draft, distilling it online.

Usage (embedded demo pair, CPU, in the vLLM environment made by bash_scripts/setup_vllm.sh):
    OMP_NUM_THREADS=1 VLLM_CPU_OMP_THREADS_BIND=nobind VLLM_CPU_KVCACHE_SPACE=1 \
    .venv-vllm/bin/python -m osd.serving --data_path runs/demo_online/stream.json \
        --output_dir runs/vllm_online --max_propose_num 2 --online_update_interval 8 --concurrency 4

The same stream files and prompt template as `osd.train --mode online`. Writes
{output_dir}/metrics.jsonl (osd.metric_keys: alpha per query window and per dataset / topic /
language, vllm_acceptance_rate, swap times; `python -m osd.plots` reads it) and the distilled draft
to {output_dir}/draft. --online_update_interval 0 serves with the draft as it is (Standard SD),
--max_propose_num 0 with the target alone. --drafter head serves an EAGLE-3 head (--head_path, or a
fresh one written to {output_dir}/served_head) with vLLM's eagle3 method and writes the distilled head
to {output_dir}/head.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import torch
from transformers import HfArgumentParser

from osd.datafiles import claim_output_dir, refuse_overwrite
from osd.distill.run_dir import LOCK_FILE, lock_run_dir
from osd.model_checks import check_same_tokenizer
from osd.models import load_model, load_tokenizer
from osd.serving.config import ServingArguments
from osd.serving.distiller import DraftDistiller, load_drafter
from osd.spec.eagle3 import save_head

OUTPUTS = ("metrics.jsonl", "draft", "head", "served_draft", "served_head", "draft_swap.safetensors",
           "draft_swap.staged")  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Parse the flags, serve the stream, return the last log entry."""
    parser = HfArgumentParser(ServingArguments, prog="python -m osd.serving", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    (args,) = parser.parse_args_into_dataclasses(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # the run's own outputs only: an input is never an output, a folder another tool wrote is refused, and so
    # is one another run is writing (its lock)
    inputs = {"--student_model_path": args.student_model_path, "--teacher_model_path": args.teacher_model_path,
              "--data_path": args.data_path, "--head_path": args.head_path}  # fmt: skip
    refuse_overwrite({"--output_dir": args.output_dir}, inputs)
    if args.max_propose_num > 0 and args.drafter == "model":  # it proposes ids that the target verifies
        tokenizer = load_tokenizer(args.teacher_model_path, None)
        check_same_tokenizer(args.student_model_path, args.teacher_model_path, tokenizer)
    with lock_run_dir(args.output_dir):
        claim_output_dir(args.output_dir, "osd.serving", OUTPUTS, inputs, ignore=(LOCK_FILE,))
        return serve(args)


def serve(args: ServingArguments) -> dict[str, float]:
    """Serve the stream with vLLM, distilling the draft online; the last log entry."""
    try:  # vLLM is imported to serve, not for --help
        from osd.serving.engine import build_engine, shutdown_engine
        from osd.serving.online import jsonl_writer, load_queries, serve_stream
        from osd.serving.subvocab import served_draft_folder
    except ImportError as e:  # a user error (one line): the wrong environment
        raise ValueError(
            f"{e}: osd.serving needs vLLM; bash bash_scripts/setup_vllm.sh makes .venv-vllm, "
            "then run .venv-vllm/bin/python -m osd.serving"
        ) from e
    torch.manual_seed(args.seed)
    tokenizer = load_tokenizer(args.teacher_model_path, None)
    queries = load_queries(args.data_path, tokenizer, args.max_model_len - args.max_new_tokens,
                           args.source_prefix, args.max_samples)  # fmt: skip
    out = Path(args.output_dir)
    head = args.drafter == "head" and args.max_propose_num > 0
    target = None
    if args.distils or head:  # the teacher, and what a fresh head is built for
        target = load_model(args.teacher_model_path, args.teacher_dtype, None).to(args.trainer_device)
    distiller = DraftDistiller.from_args(args, target) if args.distils else None
    if head:  # a fresh head (no --head_path) is served as the distiller starts it
        fresh = distiller.draft if distiller is not None else load_drafter(args, target)
        served = args.head_path or str(save_head(fresh, out / "served_head", target))
    else:
        served = served_draft_folder(args.student_model_path, args.output_dir, args.tensor_parallel_size)
    llm = build_engine(args.teacher_model_path, served, args.max_propose_num, args.teacher_dtype,
                       args.max_model_len, args.seed, args.tensor_parallel_size, args.enforce_eager)  # fmt: skip
    entries = []
    write = jsonl_writer(args.output_dir)
    serve_stream(llm, args, distiller, queries, lambda e: (entries.append(e), write(e)))
    shutdown_engine(llm)
    if distiller is not None and head:
        save_head(distiller.draft, out / "head", target)
    elif distiller is not None:
        distiller.draft.save_pretrained(out / "draft")
        tokenizer.save_pretrained(out / "draft")
    return entries[-1]


if __name__ == "__main__":
    from osd.user_errors import run_main

    sys.exit(run_main(lambda: print(main()), "python -m osd.serving"))  # user errors as one line, status 1
