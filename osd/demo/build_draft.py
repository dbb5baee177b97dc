"""Build the demo draft: a small Llama with the target's tokenizer, pre-trained on plain workload text.

The draft is *generic*: it learns the local workload (`data/local/*_train.json`) as plain
documents, each record's query and reference answer joined by a newline, plus the English prose
of the Python reference manual that ships with the interpreter (`pydoc_data.topics`), packed
into fixed-length chunks, without the chat template and never on target outputs. It has seen the
domains' words but not how the target answers, so Standard speculative decoding leaves room
for online distillation to close.

Shape: two layers (two can copy from the prompt, which the target's answers do a lot; one
cannot), hidden 256, tied embeddings (14.7M parameters, 11% of the 134.5M target); the
49152-row LM head is most of its cost. Trained with float32 weights and bf16 matmuls, stored and served in bfloat16.

Seeded and resumable: a checkpoint (`{out_dir}.build/state.pt`) is written atomically every
--checkpoint_every steps; rerunning the same command after a kill continues from it, with the
same batches the uninterrupted run would have used. The finished draft is written to a
temporary folder and renamed over `{out_dir}`.

Usage:
    python -m osd.demo.build_draft                       # osd/demo/models/draft/
    python -m osd.demo.build_draft --out_dir /tmp/draft --steps 20 --checkpoint_every 5
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    AutoTokenizer,
    HfArgumentParser,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerBase,
)

from osd.conversations import assistant_answer, load_conversations, user_query
from osd.demo import DOMAINS, DRAFT_PATH, TARGET_PATH, WORKLOAD_DIR, repo_relative
from osd.demo.lm_training import Example, eval_loss, num_params, train_lm
from osd.demo.target import ensure_if_demo_target


@dataclass
class DraftBuildConfig:
    out_dir: str = field(default=str(DRAFT_PATH), metadata={"help": "Folder for the finished draft."})
    target: str = field(
        default=str(TARGET_PATH),
        metadata={"help": "Target whose tokenizer the draft uses (hub name or path)."},
    )
    workload_dir: str = field(
        default=str(WORKLOAD_DIR), metadata={"help": "Folder with {domain}_{train,eval}.json."}
    )
    seed: int = field(default=0, metadata={"help": "Seed for initialisation, packing and batch order."})
    layers: int = field(
        default=2,
        metadata={"help": "Draft depth: two layers can copy from the prompt (induction), one cannot."},
    )
    hidden: int = field(default=256, metadata={"help": "Hidden size."})
    ffn: int = field(default=1024, metadata={"help": "MLP size."})
    heads: int = field(default=4, metadata={"help": "Attention heads."})
    max_positions: int = field(default=2048, metadata={"help": "Longest sequence the draft serves."})
    chunk_length: int = field(default=256, metadata={"help": "Tokens per packed training sequence."})
    steps: int = field(default=400, metadata={"help": "Optimizer steps."})
    batch_size: int = field(default=16, metadata={"help": "Sequences per step."})
    lr: float = field(default=2e-3, metadata={"help": "Peak learning rate."})
    warmup_steps: int = field(default=30, metadata={"help": "Linear warmup, then cosine decay to 10%."})
    python_docs: bool = field(
        default=True,
        metadata={"help": "Also train on the English prose of the Python reference manual that ships with the "
                  "interpreter (pydoc_data.topics): generic text beside the templated workload."},
    )  # fmt: skip
    checkpoint_every: int = field(default=25, metadata={"help": "Steps between resumable checkpoints."})
    bf16_autocast: bool = field(
        default=True, metadata={"help": "bf16 matmuls, float32 weights and optimizer."}
    )
    num_threads: int = field(default=0, metadata={"help": "torch threads (0 = torch's default)."})


def document_ids(tok: PreTrainedTokenizerBase, record: dict) -> list[int]:
    """One record as a plain document: query, newline, reference answer, then the end-of-text token."""
    text = user_query(record) + "\n" + (assistant_answer(record) or "")
    return tok(text, add_special_tokens=False).input_ids + [_end_of_text(tok)]


def python_docs_ids(tok: PreTrainedTokenizerBase) -> list[list[int]]:
    """The Python reference manual's topics (shipped with the interpreter) as plain documents."""
    from pydoc_data.topics import topics

    return [
        tok(text, add_special_tokens=False).input_ids + [_end_of_text(tok)]
        for _, text in sorted(topics.items())
    ]


def _end_of_text(tok: PreTrainedTokenizerBase) -> int:
    # SmolLM2's <|endoftext|> separates pre-training documents; its EOS (<|im_end|>) ends chat turns
    eot = tok.convert_tokens_to_ids("<|endoftext|>")
    return eot if isinstance(eot, int) and eot != tok.unk_token_id else tok.eos_token_id


def pack(documents: list[list[int]], length: int, seed: int) -> list[Example]:
    """Shuffle documents (seeded), concatenate, cut into chunks of `length` tokens (loss on every token)."""
    order = random.Random(f"{seed}-pack").sample(range(len(documents)), len(documents))
    stream = [t for i in order for t in documents[i]]
    return [
        (stream[i : i + length], stream[i : i + length]) for i in range(0, len(stream) - length + 1, length)
    ]


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
    out = Path(cfg.out_dir)
    work = out.with_name(out.name + ".build")
    work.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(cfg.target)
    vocab_size = AutoConfig.from_pretrained(cfg.target).vocab_size
    split = {s: [r for d in DOMAINS for r in load_conversations(Path(cfg.workload_dir) / f"{d}_{s}.json")]
             for s in ("train", "eval")}  # fmt: skip
    documents = [document_ids(tok, r) for r in split["train"]]
    if cfg.python_docs:
        documents += python_docs_ids(tok)
    train = pack(documents, cfg.chunk_length, cfg.seed)

    torch.manual_seed(cfg.seed)
    draft = make_draft(cfg, tok, vocab_size)
    metrics: dict = {"config": asdict(cfg), "torch": torch.__version__, "parameters": num_params(draft),
                     "train_chunks": len(train)}  # fmt: skip
    metrics |= train_lm(draft, train, cfg.steps, cfg.batch_size, cfg.lr, cfg.warmup_steps, cfg.seed, "draft",
                        checkpoint=work / "state.pt", checkpoint_every=cfg.checkpoint_every,
                        bf16_autocast=cfg.bf16_autocast)  # fmt: skip
    draft = draft.to(torch.bfloat16)
    metrics["eval_document_loss"] = {
        d: eval_loss(draft, [(ids, ids) for r in split["eval"] if r.get("dataset") == d for ids in [document_ids(tok, r)]])
        for d in DOMAINS
    }  # fmt: skip
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
        f"draft: {metrics['parameters'] / 1e6:.2f}M parameters, final train loss {metrics['final_train_loss']:.3f}"
    )
    for d, loss in metrics["eval_document_loss"].items():
        print(f"{d:8s} eval document loss {loss:.3f}")


if __name__ == "__main__":
    main()
