"""Build the demo draft: a small Llama distilled from the target on general queries, with a sub-vocabulary head.

A *general* draft, as the paper's LLaMA-160M is: it knows how the target talks, not the domains it
will serve. Its training data is the general corpus (`data/general/corpus.json`): user queries the
target wrote itself from its chat template's user prefix (`data/magpie_queries.py`) with the target's
greedy answers (`data/generate_answer.py`); never the workload. `build` checks that no corpus query
shares an 8-word run with any workload record and records the result.

Distillation: the target's top-K next-token log-probabilities at every answer position, computed
once, teacher-forced (`osd.distill.teacher_topk`), then a soft cross-entropy against them: forward KL
to the target's (truncated) distribution, restricted to the head's tokens. Optionally the English
prose of the Python reference manual that ships with the interpreter (`--python_docs`) is added as
plain documents, distilled the same way at every position.

The head covers the --draft_vocab_size most frequent tokens of the target's answers in the corpus
(`data/general/token_counts.json`, `data/token_counts.py`) plus the special tokens
(`osd.spec.draft_vocab`): the draft's cost is mostly its LM head.

Seeded and resumable: the teacher's top-K (`{out_dir}.build/teacher_topk.pt`) and the training state
(`{out_dir}.build/state.pt`) are saved atomically as they go; rerunning the same command after a
kill continues with the batches the uninterrupted run would have used. The finished draft is
written to a temporary folder and renamed over `{out_dir}`.

Usage:
    python -m osd.demo.build_draft                       # osd/demo/models/draft/
    python -m osd.demo.build_draft --out_dir /tmp/draft --steps 20 --checkpoint_every 5
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    HfArgumentParser,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerBase,
)

from osd.conversations import assistant_answer, load_conversations, user_query
from osd.demo.target import ensure_if_demo_target
from osd.distill.lm_training import Example, chat_example, num_params, train_lm
from osd.distill.teacher_topk import teacher_topk, topk_distillation
from osd.models import SERVING_DTYPES, resolve_dtype
from osd.paths import DOMAINS, DRAFT_PATH, REPO_ROOT, TARGET_PATH, WORKLOAD_DIR, repo_relative
from osd.spec.draft_vocab import load_token_counts, select_token_ids, set_draft_vocab
from osd.user_errors import run_main

GENERAL_DIR = REPO_ROOT / "data" / "general"


@dataclass
class DraftBuildConfig:
    out_dir: str = field(default=str(DRAFT_PATH), metadata={"help": "Folder for the finished draft."})
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
        metadata={"help": "The workload the draft must NOT have seen: checked for overlap with the corpus."},
    )
    seed: int = field(default=0, metadata={"help": "Seed for initialisation and batch order."})
    layers: int = field(default=2, metadata={"help": "Draft depth (two layers can copy from the prompt)."})
    hidden: int = field(default=256, metadata={"help": "Hidden size."})
    ffn: int = field(default=1024, metadata={"help": "MLP size."})
    heads: int = field(default=4, metadata={"help": "Attention heads."})
    max_positions: int = field(default=2048, metadata={"help": "Longest sequence the draft serves."})
    draft_vocab_size: int = field(
        default=8192, metadata={"help": "Tokens of the sub-vocabulary head (0: the full vocabulary)."}
    )
    top_k: int = field(default=32, metadata={"help": "Target log-probabilities kept per position."})
    max_length: int = field(default=320, metadata={"help": "Tokens per training example (prompt + answer)."})
    python_docs: bool = field(
        default=False,
        metadata={
            "help": "Also distil on the Python reference manual's prose (pydoc_data.topics) as plain text."
        },
    )
    steps: int = field(
        default=1200, metadata={"help": "Optimizer steps (6.4 epochs of the 3000-answer corpus)."}
    )
    batch_size: int = field(default=16, metadata={"help": "Examples per step."})
    lr: float = field(default=2e-3, metadata={"help": "Peak learning rate."})
    warmup_steps: int = field(default=40, metadata={"help": "Linear warmup, then cosine decay to 10%%."})
    teacher_batch_size: int = field(default=8, metadata={"help": "Examples per teacher forward."})
    teacher_dtype: str = field(
        default="bfloat16",
        metadata={
            "help": "dtype of the target computing the top-K (float32 is faster on CPUs without bf16 instructions).",
            "choices": SERVING_DTYPES,
        },
    )
    checkpoint_every: int = field(default=100, metadata={"help": "Steps between resumable checkpoints."})
    bf16_autocast: bool = field(
        default=True, metadata={"help": "bf16 matmuls, float32 weights and optimizer."}
    )
    num_threads: int = field(default=0, metadata={"help": "torch threads (0 = torch's default)."})


def python_docs_examples(tok: PreTrainedTokenizerBase, length: int) -> list[Example]:
    """The Python reference manual's topics (shipped with the interpreter) as plain text chunks."""
    from pydoc_data.topics import topics

    out = []
    for _, text in sorted(topics.items()):
        ids = tok(text, add_special_tokens=False).input_ids
        out += [(ids[i : i + length], ids[i : i + length]) for i in range(0, len(ids) - 16, length)]
    return out


def make_draft(cfg: DraftBuildConfig, tok: PreTrainedTokenizerBase, vocab_size: int) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=cfg.hidden, intermediate_size=cfg.ffn, num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads, num_key_value_heads=cfg.heads, max_position_embeddings=cfg.max_positions,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True, rope_theta=10000.0,
    )  # fmt: skip
    return LlamaForCausalLM(config)


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


def build(cfg: DraftBuildConfig) -> dict:
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    ensure_if_demo_target(cfg.target)
    out = Path(cfg.out_dir)
    work = out.with_name(out.name + ".build")
    work.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(cfg.target)
    corpus = [r for r in load_conversations(cfg.corpus) if assistant_answer(r)]
    metrics: dict = {"config": asdict(cfg), "torch": torch.__version__,
                     "overlap_with_workload": overlap_report(corpus, Path(cfg.workload_dir))}  # fmt: skip
    if metrics["overlap_with_workload"]["identical"]:
        raise ValueError(
            f"{cfg.corpus}: {metrics['overlap_with_workload']['identical']} queries are workload queries"
        )
    examples = [chat_example(tok, r, cfg.max_length) for r in corpus]
    if cfg.python_docs:
        examples += python_docs_examples(tok, cfg.max_length)
    target = AutoModelForCausalLM.from_pretrained(cfg.target, dtype=resolve_dtype(cfg.teacher_dtype)).eval()
    targets = teacher_topk(target, examples, cfg.top_k, work / "teacher_topk.pt", cfg.teacher_batch_size)
    del target

    torch.manual_seed(cfg.seed)
    draft = make_draft(cfg, tok, AutoConfig.from_pretrained(cfg.target).vocab_size)
    if cfg.draft_vocab_size:
        counts = load_token_counts(cfg.token_counts)
        ids = select_token_ids(counts["counts"], cfg.draft_vocab_size, tok.all_special_ids)
        set_draft_vocab(draft, ids)
        metrics["draft_vocab_coverage"] = sum(counts["counts"].get(t, 0) for t in ids) / counts["num_tokens"]
    metrics |= {"parameters": num_params(draft), "train_examples": len(examples)}
    metrics |= train_lm(draft, examples, cfg.steps, cfg.batch_size, cfg.lr, cfg.warmup_steps, cfg.seed, "draft",
                        checkpoint=work / "state.pt", checkpoint_every=cfg.checkpoint_every,
                        bf16_autocast=cfg.bf16_autocast, batch_loss=topk_distillation(examples, targets))  # fmt: skip
    draft = draft.to(torch.bfloat16)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    draft.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "build_metrics.json").write_text(json.dumps(repo_relative(metrics), indent=1) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    shutil.rmtree(work)
    return metrics


def main() -> None:
    (cfg,) = HfArgumentParser(DraftBuildConfig).parse_args_into_dataclasses()
    metrics = build(cfg)
    print(
        f"draft: {metrics['parameters'] / 1e6:.2f}M parameters, final train loss {metrics['final_train_loss']:.3f}; "
        f"overlap with the workload: {metrics['overlap_with_workload']}"
    )


if __name__ == "__main__":
    raise SystemExit(run_main(main, "osd.demo.build_draft"))
