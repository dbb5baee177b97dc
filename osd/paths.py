"""Where the repository keeps its embedded default (demo models, local workload), and
`repo_relative`, which keeps machine paths out of recorded results."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
MODELS_DIR = REPO_ROOT / "osd" / "demo" / "models"
TARGET_PATH = MODELS_DIR / "target"
DRAFT_PATH = MODELS_DIR / "draft"
HEAD_PATH = MODELS_DIR / "head"  # the Standard EAGLE-3 head (osd.demo.build_head)
TINY_TEACHER_PATH = MODELS_DIR / "tiny" / "teacher"
TINY_DRAFT_PATH = MODELS_DIR / "tiny" / "draft"
T5_TEACHER_PATH = MODELS_DIR / "t5" / "teacher"
T5_DRAFT_PATH = MODELS_DIR / "t5" / "draft"
WORKLOAD_DIR = REPO_ROOT / "data" / "local"
DOMAINS = ("sql", "math", "code", "finance")


def repo_relative(obj):
    """`obj` (a JSON-able structure) with every path string inside this repository made relative to
    its root, so that recorded results name no machine paths."""
    if isinstance(obj, dict):
        return {k: repo_relative(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [repo_relative(v) for v in obj]
    if isinstance(obj, str) and obj.startswith(f"{REPO_ROOT}/"):
        return obj[len(str(REPO_ROOT)) + 1 :]
    return obj


def workload_path(domain: str, split: str) -> Path:
    """`data/local/{domain}_{split}.json`; raises naming the known domains for a typo."""
    if domain not in DOMAINS or split not in ("train", "eval"):
        raise ValueError(f"unknown workload file {domain}_{split}: domains are {DOMAINS}, splits train/eval")
    return WORKLOAD_DIR / f"{domain}_{split}.json"
