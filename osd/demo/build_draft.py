"""Build the demo draft: a small Llama distilled from the target on general queries, with a sub-vocabulary head.

A *general* draft, as the paper's LLaMA-160M is: it knows how the target talks, not the domains it
will serve. Its training data is the general corpus (`data/general/corpus.json`): user queries the
target wrote itself from its chat template's user prefix (`data/magpie_queries.py`) with the target's
greedy answers (`data/generate_answer.py`); never the workload. `build` checks the corpus against
the workload and records the result (`osd.demo.general_corpus`, which the Standard head's build shares).

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

from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    HfArgumentParser,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerBase,
)

from osd.demo.general_corpus import (
    GeneralBuildConfig,
    build_folder,
    general_token_ids,
    load_general_corpus,
    publish,
)
from osd.demo.target import ensure_if_demo_target
from osd.distill.lm_training import Example, num_params, train_lm
from osd.distill.teacher_topk import teacher_topk, topk_distillation
from osd.models import SERVING_DTYPES, resolve_dtype
from osd.spec.draft_vocab import set_draft_vocab
from osd.user_errors import run_main


@dataclass
class DraftBuildConfig(GeneralBuildConfig):
    layers: int = field(default=2, metadata={"help": "Draft depth (two layers can copy from the prompt)."})
    hidden: int = field(default=256, metadata={"help": "Hidden size."})
    ffn: int = field(default=1024, metadata={"help": "MLP size."})
    heads: int = field(default=4, metadata={"help": "Attention heads."})
    max_positions: int = field(default=2048, metadata={"help": "Longest sequence the draft serves."})
    top_k: int = field(default=32, metadata={"help": "Target log-probabilities kept per position."})
    python_docs: bool = field(
        default=False,
        metadata={
            "help": "Also distil on the Python reference manual's prose (pydoc_data.topics) as plain text."
        },
    )
    teacher_batch_size: int = field(default=8, metadata={"help": "Examples per teacher forward."})
    teacher_dtype: str = field(
        default="bfloat16",
        metadata={
            "help": "dtype of the target computing the top-K (float32 is faster on CPUs without bf16 instructions).",
            "choices": SERVING_DTYPES,
        },
    )


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


def build(cfg: DraftBuildConfig) -> dict:
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    ensure_if_demo_target(cfg.target)
    work = build_folder(cfg)
    tok, examples, metrics = load_general_corpus(cfg)
    if cfg.python_docs:
        examples += python_docs_examples(tok, cfg.max_length)
    target = AutoModelForCausalLM.from_pretrained(cfg.target, dtype=resolve_dtype(cfg.teacher_dtype)).eval()
    targets = teacher_topk(target, examples, cfg.top_k, work / "teacher_topk.pt", cfg.teacher_batch_size)
    del target

    torch.manual_seed(cfg.seed)
    draft = make_draft(cfg, tok, AutoConfig.from_pretrained(cfg.target).vocab_size)
    if cfg.draft_vocab_size:
        ids, metrics["draft_vocab_coverage"] = general_token_ids(cfg, tok)
        set_draft_vocab(draft, ids)
    metrics |= {"parameters": num_params(draft), "train_examples": len(examples)}
    metrics |= train_lm(draft, examples, cfg.steps, cfg.batch_size, cfg.lr, cfg.warmup_steps, cfg.seed, "draft",
                        checkpoint=work / "state.pt", checkpoint_every=cfg.checkpoint_every,
                        bf16_autocast=cfg.bf16_autocast, batch_loss=topk_distillation(examples, targets))  # fmt: skip
    draft = draft.to(torch.bfloat16)

    def write(folder: Path) -> None:
        draft.save_pretrained(folder)
        tok.save_pretrained(folder)

    publish(cfg, write, metrics)
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
