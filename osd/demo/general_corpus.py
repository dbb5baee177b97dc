"""What the demo's Standard drafters share: the general corpus they are distilled on and how a build runs.

Both the draft model (`osd.demo.build_draft`) and the EAGLE-3 head (`osd.demo.build_head`) learn from the general
corpus (`data/general/corpus.json`): user queries the target wrote itself from its chat template's user prefix
(`data/magpie_queries.py`) with the target's greedy answers (`data/generate_answer.py`); never the workload.
`load_general_corpus` checks that no corpus query equals a workload query (and counts those sharing an 8-word run
with one) and records it. Both score a sub-vocabulary: the most frequent tokens of the target's answers in the
corpus (`data/general/token_counts.json`, `osd.spec.draft_vocab`).

A build keeps its resumable state in `{out_dir}.build/` and writes the finished drafter to `{out_dir}.tmp/`,
renamed over `{out_dir}` (`publish`): a kill leaves the previous drafter or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from osd.conversations import assistant_answer, load_conversations, user_query
from osd.distill.lm_training import Example, chat_example
from osd.paths import DOMAINS, DRAFT_PATH, REPO_ROOT, TARGET_PATH, WORKLOAD_DIR, repo_relative
from osd.spec.draft_vocab import load_token_counts, select_token_ids

GENERAL_DIR = REPO_ROOT / "data" / "general"


@dataclass
class GeneralBuildConfig:
    """A Standard drafter distilled from the target on the general corpus (the fields both builds share)."""

    out_dir: str = field(default=str(DRAFT_PATH), metadata={"help": "Folder for the finished drafter."})
    target: str = field(
        default=str(TARGET_PATH),
        metadata={"help": "Target to distil from (hub name or path); its tokenizer too."},
    )
    corpus: str = field(
        default=str(GENERAL_DIR / "corpus.json"),
        metadata={"help": "General queries with the target's answers (conversation JSON)."},
    )
    token_counts: str = field(
        default=str(GENERAL_DIR / "token_counts.json"),
        metadata={"help": "Token frequencies of the target's answers (data/token_counts.py) for the head."},
    )
    workload_dir: str = field(
        default=str(WORKLOAD_DIR),
        metadata={
            "help": "The workload the drafter must NOT have seen: checked for overlap with the corpus."
        },
    )
    seed: int = field(default=0, metadata={"help": "Seed for initialisation and batch order."})
    draft_vocab_size: int = field(
        default=8192, metadata={"help": "Tokens of the sub-vocabulary head (0: the full vocabulary)."}
    )
    max_length: int = field(default=320, metadata={"help": "Tokens per training example (prompt + answer)."})
    steps: int = field(
        default=1200, metadata={"help": "Optimizer steps (6.4 epochs of the 3000-answer corpus)."}
    )
    batch_size: int = field(default=16, metadata={"help": "Examples per step."})
    lr: float = field(default=2e-3, metadata={"help": "Peak learning rate."})
    warmup_steps: int = field(default=40, metadata={"help": "Linear warmup, then cosine decay to 10%%."})
    checkpoint_every: int = field(default=100, metadata={"help": "Steps between resumable checkpoints."})
    bf16_autocast: bool = field(
        default=True, metadata={"help": "bf16 matmuls, float32 weights and optimizer."}
    )
    num_threads: int = field(default=0, metadata={"help": "torch threads (0 = torch's default)."})


def word_runs(text: str, n: int = 8) -> set[tuple[str, ...]]:
    words = re.findall(r"\w+", text.lower())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def overlap_report(corpus: list[dict], workload_dir: Path) -> dict:
    """How many corpus queries equal, or share an 8-word run with, any workload record's query."""
    workload = [user_query(r) for d in DOMAINS for s in ("train", "eval")
                for r in load_conversations(workload_dir / f"{d}_{s}.json")]  # fmt: skip
    exact = {" ".join(q.lower().split()) for q in workload}
    runs = set().union(*(word_runs(q) for q in workload))
    queries = [user_query(r) for r in corpus]
    return {
        "workload_queries": len(workload),
        "corpus_queries": len(queries),
        "identical": sum(" ".join(q.lower().split()) in exact for q in queries),
        "sharing_an_8_word_run": sum(bool(word_runs(q) & runs) for q in queries),
    }


def load_general_corpus(cfg: GeneralBuildConfig) -> tuple[PreTrainedTokenizerBase, list[Example], dict]:
    """The target's tokenizer, the corpus's chat examples (loss on the answers) and the build's first metrics
    (its config, torch's version, the overlap with the workload); refuses a corpus holding workload queries."""
    tok = AutoTokenizer.from_pretrained(cfg.target)
    corpus = [r for r in load_conversations(cfg.corpus) if assistant_answer(r)]
    overlap = overlap_report(corpus, Path(cfg.workload_dir))
    if overlap["identical"]:
        raise ValueError(f"{cfg.corpus}: {overlap['identical']} queries are workload queries")
    metrics = {"config": asdict(cfg), "torch": torch.__version__, "overlap_with_workload": overlap}
    return tok, [chat_example(tok, r, cfg.max_length) for r in corpus], metrics


def general_token_ids(cfg: GeneralBuildConfig, tok: PreTrainedTokenizerBase) -> tuple[list[int], float]:
    """The sub-vocabulary (the --draft_vocab_size most frequent answer tokens and the special ones) and the
    share of the corpus's answer tokens it covers."""
    counts = load_token_counts(cfg.token_counts)
    ids = select_token_ids(counts["counts"], cfg.draft_vocab_size, tok.all_special_ids)
    return ids, sum(counts["counts"].get(t, 0) for t in ids) / counts["num_tokens"]


def build_folder(cfg: GeneralBuildConfig) -> Path:
    """`{out_dir}.build/`: the build's resumable state (created)."""
    out = Path(cfg.out_dir)
    work = out.with_name(out.name + ".build")
    work.mkdir(parents=True, exist_ok=True)
    return work


def publish(cfg: GeneralBuildConfig, write: Callable[[Path], object], metrics: dict) -> None:
    """`write(folder)` into `{out_dir}.tmp/` with `build_metrics.json`, rename it over `{out_dir}`, then delete the
    build's state."""
    out = Path(cfg.out_dir)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write(tmp)
    (tmp / "build_metrics.json").write_text(json.dumps(repo_relative(metrics), indent=1) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    shutil.rmtree(build_folder(cfg))
