"""Build the tiny test pair (tokenizer, toy teacher, draft), seeded: for fast tests, not the default.

The embedded default is SmolLM2-135M-Instruct with `osd.demo.build_draft`'s draft; this tiny
pair (a 1.8M-parameter teacher: speculative decoding cannot pay with it) is for tests and the
llama.cpp fixtures, which need a trained pair that loads in milliseconds and stays small in git.

1. A SentencePiece BPE tokenizer with byte fallback is trained on the local workload
   (`data/local/*_train.json`) and saved in HF format (a Llama tokenizer, `tokenizer.model`
   kept for llama.cpp's converter) with a short chat template `"<s>USER: {q}\\nASSISTANT:"`;
   `--tokenizer FOLDER` reuses a saved one instead (the committed pair keeps the tokenizer it was
   first built with, before the workload was regenerated, so its recorded fixtures stay valid).
2. The teacher, a narrow LlamaForCausalLM deeper than the draft, is trained from scratch on every domain's
   prompt + answer (chat template, loss on the answer tokens).
3. The draft, one wide layer, is pre-trained for fewer steps on the domains' generic text
   only: each record's query and reference answer as a plain document, without the chat
   template and never on teacher outputs. So Standard speculative decoding leaves room for
   distillation.

Weights are stored in fp16 (`config.json` keeps float32, so `from_pretrained` loads float32).
Outputs: `{out_dir}/{teacher,draft}/` (config, safetensors, tokenizer) and
`{out_dir}/build_metrics.json` (parameters, training tokens, losses, teacher samples).

Usage (from the repository root):
    python -m tests.builders.build_tiny_pair --tokenizer osd/demo/models/tiny/teacher   # the committed pair
    python -m tests.builders.build_tiny_pair --out_dir /tmp/demo_quick --teacher_steps 20 --draft_steps 10
"""

from __future__ import annotations

import io
import json
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import sentencepiece as spm
import torch
from transformers import (
    AutoTokenizer,
    HfArgumentParser,
    LlamaConfig,
    LlamaForCausalLM,
    LlamaTokenizer,
    PreTrainedTokenizerBase,
)

from osd.conversations import assistant_answer, load_conversations, user_query
from osd.distill.lm_training import Example, chat_example, eval_loss, num_params, train_lm
from osd.paths import DOMAINS, TINY_TEACHER_PATH, WORKLOAD_DIR
from osd.prompting import encode_prompt

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'user' %}USER: {{ m['content'] }}\n"
    "{% elif m['role'] == 'assistant' %}ASSISTANT: {{ m['content'] }}{{ eos_token }}\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)


@dataclass
class BuildConfig:
    out_dir: str = field(
        default=str(TINY_TEACHER_PATH.parent),
        metadata={"help": "Folder for teacher/, draft/ and build_metrics.json."},
    )
    workload_dir: str = field(
        default=str(WORKLOAD_DIR), metadata={"help": "Folder with {domain}_{train,eval}.json."}
    )
    tokenizer: str = field(
        default="", metadata={"help": "Tokenizer folder to reuse (with tokenizer.model); empty: train one."}
    )
    seed: int = field(default=0, metadata={"help": "Seed for initialisation and batch order."})
    vocab_size: int = field(default=3072, metadata={"help": "SentencePiece vocabulary size."})
    teacher_layers: int = field(default=4, metadata={"help": "Teacher depth."})
    teacher_hidden: int = field(default=128, metadata={"help": "Teacher hidden size."})
    teacher_ffn: int = field(default=512, metadata={"help": "Teacher MLP size."})
    teacher_heads: int = field(default=4, metadata={"help": "Teacher attention heads."})
    draft_layers: int = field(default=1, metadata={"help": "Draft depth (shallower than the teacher)."})
    draft_hidden: int = field(default=64, metadata={"help": "Draft hidden size."})
    draft_ffn: int = field(default=256, metadata={"help": "Draft MLP size."})
    draft_heads: int = field(default=4, metadata={"help": "Draft attention heads."})
    teacher_steps: int = field(default=500, metadata={"help": "Teacher optimizer steps."})
    draft_steps: int = field(
        default=300, metadata={"help": "Draft optimizer steps (fewer than the teacher's)."}
    )
    batch_size: int = field(default=32, metadata={"help": "Sequences per step."})
    teacher_lr: float = field(default=3e-3, metadata={"help": "Teacher peak learning rate."})
    draft_lr: float = field(default=2e-3, metadata={"help": "Draft peak learning rate."})
    warmup_steps: int = field(default=30, metadata={"help": "Linear warmup, then cosine decay to 10%%."})
    max_length: int = field(default=160, metadata={"help": "Sequences are cut to this many tokens."})
    num_threads: int = field(
        default=1,
        metadata={"help": "torch threads (0 = torch's default); 1 is fastest on a shared 2-core machine."},
    )

    def __post_init__(self) -> None:
        if self.draft_steps > self.teacher_steps:
            raise ValueError(
                "--draft_steps must not exceed --teacher_steps: the draft is meant to be the weaker model"
            )


# ----------------------------------------------------------------------------- tokenizer


def train_tokenizer(texts: list[str], vocab_size: int) -> tuple[PreTrainedTokenizerBase, bytes]:
    """SentencePiece BPE (byte fallback, no normalisation so code whitespace survives): (HF Llama tokenizer, tokenizer.model bytes)."""
    lines = [line for text in texts for line in text.split("\n") if line.strip()]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, model_type="bpe", vocab_size=vocab_size,
        byte_fallback=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        split_digits=True, allow_whitespace_only_pieces=True, character_coverage=0.9995,
        unk_id=0, bos_id=1, eos_id=2, pad_id=3, num_threads=1, shuffle_input_sentence=False,
        input_sentence_size=0, max_sentence_length=8192, minloglevel=2,
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "tokenizer.model").write_bytes(model.getvalue())
        tok = LlamaTokenizer.from_pretrained(tmp)
    tok.pad_token = "<pad>"
    tok.chat_template = CHAT_TEMPLATE
    return tok, model.getvalue()


# ----------------------------------------------------------------------------- data


def draft_example(tok: PreTrainedTokenizerBase, record: dict, max_length: int) -> Example:
    """(ids, labels): the query and the reference answer as one plain document, no chat template."""
    text = user_query(record) + "\n" + (assistant_answer(record) or "")
    ids = ([tok.bos_token_id] + tok(text, add_special_tokens=False).input_ids + [tok.eos_token_id])[
        :max_length
    ]
    return ids, list(ids)


# ----------------------------------------------------------------------------- models


def make_model(
    tok: PreTrainedTokenizerBase, layers: int, hidden: int, ffn: int, heads: int
) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=512,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
    )  # fmt: skip
    return LlamaForCausalLM(config)


def save_model(model: LlamaForCausalLM, tok: PreTrainedTokenizerBase, sp_model: bytes, path: Path) -> None:
    """fp16 safetensors (the config stays float32), the HF tokenizer files and tokenizer.model."""
    state = {k: v.to(torch.float16) for k, v in model.state_dict().items()}
    model.save_pretrained(path, state_dict=state)
    tok.save_pretrained(path)
    (path / "tokenizer.model").write_bytes(sp_model)


@torch.inference_mode()
def teacher_samples(
    model: LlamaForCausalLM, tok: PreTrainedTokenizerBase, records: list[dict], n: int
) -> list[dict]:
    out = []
    for rec in records[:n]:
        ids = torch.tensor([encode_prompt(tok, user_query(rec))])  # [1, T]
        gen = model.generate(
            ids,
            max_new_tokens=80,
            do_sample=False,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        )
        out.append({"query": user_query(rec), "teacher": tok.decode(gen[0, ids.shape[1] :], skip_special_tokens=True),
                    "reference": assistant_answer(rec)})  # fmt: skip
    return out


def build(cfg: BuildConfig) -> dict:
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    out = Path(cfg.out_dir)
    workload = {
        (d, s): load_conversations(Path(cfg.workload_dir) / f"{d}_{s}.json")
        for d in DOMAINS
        for s in ("train", "eval")
    }
    train = [r for d in DOMAINS for r in workload[d, "train"]]
    texts = [t["content"] for r in train for t in r["conversation"]] + ["USER:", "ASSISTANT:"]
    if cfg.tokenizer:
        tok = AutoTokenizer.from_pretrained(cfg.tokenizer)
        sp_model = (Path(cfg.tokenizer) / "tokenizer.model").read_bytes()
    else:
        tok, sp_model = train_tokenizer(texts, cfg.vocab_size)

    metrics: dict = {"config": asdict(cfg), "torch": torch.__version__}
    torch.manual_seed(cfg.seed)
    teacher = make_model(tok, cfg.teacher_layers, cfg.teacher_hidden, cfg.teacher_ffn, cfg.teacher_heads)
    metrics["teacher"] = {"parameters": num_params(teacher)}
    metrics["teacher"] |= train_lm(teacher, [chat_example(tok, r, cfg.max_length) for r in train],
                                   cfg.teacher_steps, cfg.batch_size, cfg.teacher_lr, cfg.warmup_steps,
                                   cfg.seed, "teacher")  # fmt: skip
    save_model(teacher, tok, sp_model, out / "teacher")

    torch.manual_seed(cfg.seed + 1)
    draft = make_model(tok, cfg.draft_layers, cfg.draft_hidden, cfg.draft_ffn, cfg.draft_heads)
    metrics["draft"] = {"parameters": num_params(draft)}
    metrics["draft"] |= train_lm(draft, [draft_example(tok, r, cfg.max_length) for r in train],
                                 cfg.draft_steps, cfg.batch_size, cfg.draft_lr, cfg.warmup_steps,
                                 cfg.seed, "draft")  # fmt: skip
    save_model(draft, tok, sp_model, out / "draft")

    # Figures on the saved (fp16-rounded) weights, loaded back as float32 like every tool does.
    teacher = LlamaForCausalLM.from_pretrained(out / "teacher", dtype=torch.float32).eval()
    draft = LlamaForCausalLM.from_pretrained(out / "draft", dtype=torch.float32).eval()
    metrics["eval_answer_loss"] = {
        d: {name: eval_loss(m, [chat_example(tok, r, cfg.max_length) for r in workload[d, "eval"]])
            for name, m in (("teacher", teacher), ("draft", draft))}
        for d in DOMAINS
    }  # fmt: skip
    metrics["teacher_samples"] = {d: teacher_samples(teacher, tok, workload[d, "eval"], 3) for d in DOMAINS}
    (out / "build_metrics.json").write_text(json.dumps(metrics, indent=1, ensure_ascii=False) + "\n")
    return metrics


def main() -> None:
    (cfg,) = HfArgumentParser(BuildConfig).parse_args_into_dataclasses()
    metrics = build(cfg)
    for d, losses in metrics["eval_answer_loss"].items():
        print(f"{d:8s} eval answer loss: teacher {losses['teacher']:.3f}  draft {losses['draft']:.3f}")
    for d, samples in metrics["teacher_samples"].items():
        print(f"--- {d}: {samples[0]['query']!r}\n    teacher: {samples[0]['teacher']!r}")


if __name__ == "__main__":
    main()
