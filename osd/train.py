r"""Distil a draft (student) model from a target (teacher), offline or online.

Usage (real models, as the paper; see bash_scripts/*/offline.sh):
    python -m osd.train --student_model_path JackFram/llama-160m --teacher_model_path lmsys/vicuna-7b-v1.3 \
        --data_path data/raw_data/gsm8k_train_with_answer.json --eval_data_path data/raw_data/gsm8k_test.json \
        --mode offline --sample_source student --kl_method forward --max_propose_num 5 \
        --output_dir runs/gsm8k_student_forward --bf16 True --num_train_epochs 2 --report_to wandb

Usage (embedded demo pair, CPU, no downloads): bash bash_scripts/demo/offline.sh runs/demo student forward

Every `transformers.TrainingArguments` flag works too, and so do the reference's command lines
(osd.distill.reference_flags maps its renamed and T5-only flags). An --output_dir that holds a run
is refused unless --resume_from_checkpoint (a checkpoint, or `last` for the newest complete one) or
--overwrite_output_dir (start over) is given; one that a running run holds, or that is or lies in a
model or data folder, is refused before any model loads: see osd.distill.run_dir. The run itself is
`osd.distill.experiment.run`, which Python callers use with typed arguments.
"""

from __future__ import annotations

import logging
import os
import sys

# Huge pages for torch's CPU buffers of 2 MB and more, unless the user chose otherwise: an online update
# allocates its dense [V, H] embedding gradients afresh at every step, and faulting them in 4 KB pages at a
# time is a large part of the update (benchmarks/results/general_draft/LOG.md). torch reads the variable
# once, at its first allocation, hence before it is imported. Set here, at the command line's entry point
# (`python -m osd.train`, `osd-train`), not by `import osd`: a library leaves the environment to its caller.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

import torch  # noqa: E402

from osd.distill.experiment import run  # noqa: E402
from osd.distill.flags import parse_train_args  # noqa: E402


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Parse the flags (`osd.distill.flags`) and run (`osd.distill.experiment.run`); the final eval metrics.
    A multi-process run (torchrun) leaves its process group here, before the interpreter tears it down."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return run(*parse_train_args(sys.argv[1:] if argv is None else argv))
    finally:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


if __name__ == "__main__":
    from osd.cli import train

    sys.exit(train())  # refusals as one error line, exit status 1
