r"""Drafts for the online vs offline vs Standard ablation (`benchmarks/ablations.py drafts --part methods`).

Runs `benchmarks.online_single` (Fig. 2 analogue: the demo draft distilled online on one domain's
stream, Standard on the same stream, and an offline-distilled draft trained beforehand on that
domain's other training queries) with the flags given, and records its results (alpha per quarter
of the stream, update cost) as `{results}/parts/methods_training.json`. Training only: it may
share the machine with one other 1-thread job. The drafts stay in --out: `online/` and `offline0_draft/`.

    python -m benchmarks.ablation_methods --results benchmarks/results/ablations/v1 -- \
        --domain finance --queries 32 --online_update_interval 1 --learning_rate 3e-4 --offline_steps 16 \
        --sample_fraction 0 --out outputs/ablations/methods
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks import online_single
from osd.results import write_part


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default="outputs/ablations", help="folder of the ablation records")
    args, rest = ap.parse_known_args(argv)
    results = online_single.main([a for a in rest if a != "--"])
    write_part(Path(args.results), "methods_training", "benchmarks.ablation_methods", argv, results)
    return results


if __name__ == "__main__":
    main()
