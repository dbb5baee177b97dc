"""Build the T5 demo pair (an encoder-decoder teacher and a smaller draft) on the local workload, seeded.

The encoder-decoder counterpart of the embedded demo pair, for `bash_scripts/t5/*.sh` and the
Table-1 analogue's T5 rows, built from nothing on one CPU core:

1. the tokenizer is the tiny pair's SentencePiece BPE (`osd/demo/models/tiny/teacher`, vocabulary
   3072, trained on the workload), without its chat template: a T5 encoder reads the bare query;
2. the teacher, a T5 (gated-GELU MLP, LM head tied to the embeddings), is trained on every domain's
   query -> reference answer (encoder: the query; decoder: the answer + EOS), tokenized by
   `osd.distill.data.ConversationDataset` exactly as the trainer feeds it;
3. the draft, a T5 with one encoder and one decoder layer and half the width, is trained on the same
   records for fewer steps. It learns the task's form but not the teacher's habits, so Standard
   speculative decoding leaves room for distillation.

Both loops are `osd.distill.lm_training.train_lm` (seeded batch order, atomic checkpoints in
`{out_dir}.build/`): rerunning the same command after a kill continues where it stopped. The
finished pair (bf16 safetensors, `build_metrics.json`) is written to a temporary folder and
renamed over `{out_dir}`.

Usage:
    python -m tests.builders.build_t5_pair                       # osd/demo/models/t5/{teacher,draft}
    python -m tests.builders.build_t5_pair --evaluate_only       # re-measure losses and Standard alpha only
    python -m tests.builders.build_t5_pair --out_dir /tmp/t5 --teacher_steps 4 --draft_steps 2
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import (
    AutoTokenizer,
    HfArgumentParser,
    PreTrainedTokenizerBase,
    T5Config,
    T5ForConditionalGeneration,
)

from osd.alpha import format_alpha
from osd.conversations import assistant_answer, user_query
from osd.distill.data import ConversationDataset
from osd.distill.lm_training import eval_loss, num_params, seq2seq_example, train_lm
from osd.paths import DOMAINS, T5_TEACHER_PATH, TINY_TEACHER_PATH, WORKLOAD_DIR, repo_relative
from osd.spec import measure_acceptance
from osd.spec.gamma import DEFAULT as GAMMA_DEFAULT


@dataclass
class T5BuildConfig:
    out_dir: str = field(
        default=str(T5_TEACHER_PATH.parent),
        metadata={"help": "Folder for teacher/, draft/, build_metrics.json."},
    )
    tokenizer: str = field(
        default=str(TINY_TEACHER_PATH), metadata={"help": "Tokenizer folder (default: the tiny pair's)."}
    )
    workload_dir: str = field(
        default=str(WORKLOAD_DIR), metadata={"help": "Folder with {domain}_{train,eval}.json."}
    )
    seed: int = field(default=0, metadata={"help": "Seed for initialisation and batch order."})
    teacher_layers: int = field(default=2, metadata={"help": "Teacher encoder and decoder layers (each)."})
    teacher_d_model: int = field(default=128, metadata={"help": "Teacher hidden size."})
    teacher_d_ff: int = field(default=512, metadata={"help": "Teacher gated MLP size."})
    draft_layers: int = field(default=1, metadata={"help": "Draft encoder and decoder layers (each)."})
    draft_d_model: int = field(default=64, metadata={"help": "Draft hidden size."})
    draft_d_ff: int = field(default=192, metadata={"help": "Draft gated MLP size."})
    heads: int = field(default=4, metadata={"help": "Attention heads (d_kv = d_model / heads)."})
    teacher_steps: int = field(default=1200, metadata={"help": "Teacher optimizer steps."})
    draft_steps: int = field(
        default=300, metadata={"help": "Draft optimizer steps (fewer than the teacher's)."}
    )
    batch_size: int = field(default=32, metadata={"help": "Records per step."})
    teacher_lr: float = field(default=1e-3, metadata={"help": "Teacher peak learning rate."})
    draft_lr: float = field(default=1e-3, metadata={"help": "Draft peak learning rate."})
    warmup_steps: int = field(default=30, metadata={"help": "Linear warmup, then cosine decay to 10%%."})
    max_length: int = field(default=128, metadata={"help": "Encoder and decoder tokens are cut to this."})
    checkpoint_every: int = field(default=50, metadata={"help": "Steps between resumable checkpoints."})
    bf16_autocast: bool = field(
        default=True, metadata={"help": "bf16 matmuls, float32 weights and optimizer."}
    )
    num_threads: int = field(default=1, metadata={"help": "torch threads (0 = torch's default)."})
    alpha_queries: int = field(default=40, metadata={"help": "Eval queries per domain for Standard alpha."})
    alpha_gamma: int = field(
        default=GAMMA_DEFAULT,
        metadata={"help": "gamma for Standard alpha (the T5 scripts' --max_propose_num)."},
    )
    alpha_max_new_tokens: int = field(
        default=64, metadata={"help": "Tokens generated per query for Standard alpha."}
    )
    evaluate_only: bool = field(
        default=False, metadata={"help": "Only (re)measure the figures of the pair already in --out_dir."}
    )

    def __post_init__(self) -> None:
        if self.draft_steps > self.teacher_steps:
            raise ValueError(
                "--draft_steps must not exceed --teacher_steps: the draft is meant to be the weaker model"
            )


def make_t5(
    tok: PreTrainedTokenizerBase, layers: int, d_model: int, d_ff: int, heads: int
) -> T5ForConditionalGeneration:
    config = T5Config(
        vocab_size=len(tok), d_model=d_model, d_kv=d_model // heads, d_ff=d_ff, num_layers=layers,
        num_decoder_layers=layers, num_heads=heads, feed_forward_proj="gated-gelu", tie_word_embeddings=True,
        dropout_rate=0.0, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.pad_token_id,
    )  # fmt: skip
    return T5ForConditionalGeneration(config)


def load_tokenizer(path: str) -> PreTrainedTokenizerBase:
    """The tokenizer of `path` without a chat template (T5 reads the bare query)."""
    tok = AutoTokenizer.from_pretrained(path)
    tok.chat_template = None
    if tok.pad_token is None:
        raise ValueError(f"{path}: the tokenizer has no pad token (T5's decoder start token)")
    return tok


@torch.inference_mode()
def greedy_samples(
    model: T5ForConditionalGeneration, tok: PreTrainedTokenizerBase, data: ConversationDataset, n: int
) -> list[dict]:
    out = []
    for i in range(min(n, len(data))):
        ids = torch.tensor([data[i]["prompt_ids"]])  # [1, S]
        gen = model.generate(ids, max_new_tokens=64, do_sample=False)  # [1, 1 + N]
        text = tok.decode(gen[0], skip_special_tokens=True)
        record = data.records[i]
        out.append({"query": user_query(record), "teacher": text, "reference": assistant_answer(record)})
    return out


def workload(cfg: T5BuildConfig, tok: PreTrainedTokenizerBase) -> dict[tuple[str, str], ConversationDataset]:
    """(domain, split) -> the workload file as the trainer reads it for an encoder-decoder model."""
    return {
        (d, s): ConversationDataset(Path(cfg.workload_dir) / f"{d}_{s}.json", tok, cfg.max_length, is_encoder_decoder=True)
        for d in DOMAINS
        for s in ("train", "eval")
    }  # fmt: skip


def standard_alpha(
    draft, teacher, data: ConversationDataset, n: int, gamma: int, max_new_tokens: int, eos_token_id: int
) -> float | None:
    """Exact alpha of greedy speculative decoding over the first n queries (proposal-weighted; None when
    nothing was proposed)."""
    prompts = [data[i]["prompt_ids"] for i in range(min(n, len(data)))]  # each the encoder's input
    return measure_acceptance(draft, teacher, prompts, gamma, max_new_tokens, eos_token_id=eos_token_id).alpha


def evaluate_pair(cfg: T5BuildConfig, folder: Path, data: dict | None = None) -> dict:
    """Eval answer loss, Standard alpha per domain and teacher samples of the pair in `folder`, on the
    saved bf16 weights loaded as float32; merged into `folder/build_metrics.json` and returned."""
    tok = load_tokenizer(str(folder / "teacher"))
    data = data or workload(cfg, tok)
    models = {n: T5ForConditionalGeneration.from_pretrained(folder / n, dtype=torch.float32).eval()
              for n in ("teacher", "draft")}  # fmt: skip
    metrics = json.loads((folder / "build_metrics.json").read_text())
    metrics["eval_answer_loss"] = {
        d: {n: eval_loss(m, [seq2seq_example(data[d, "eval"], i) for i in range(len(data[d, "eval"]))])
            for n, m in models.items()}
        for d in DOMAINS
    }  # fmt: skip
    metrics["standard_alpha"] = {
        "gamma": cfg.alpha_gamma,
        "queries_per_domain": cfg.alpha_queries,
        "max_new_tokens": cfg.alpha_max_new_tokens,
        **{d: standard_alpha(models["draft"], models["teacher"], data[d, "eval"], cfg.alpha_queries,
                             cfg.alpha_gamma, cfg.alpha_max_new_tokens, tok.eos_token_id) for d in DOMAINS},
    }  # fmt: skip
    metrics["teacher_samples"] = {
        d: greedy_samples(models["teacher"], tok, data[d, "eval"], 3) for d in DOMAINS
    }
    (folder / "build_metrics.json").write_text(json.dumps(metrics, indent=1, ensure_ascii=False) + "\n")
    return metrics


def build(cfg: T5BuildConfig) -> dict:
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    out = Path(cfg.out_dir)
    if cfg.evaluate_only:
        return evaluate_pair(cfg, out)
    work = out.with_name(out.name + ".build")
    work.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(cfg.tokenizer)
    data = workload(cfg, tok)
    train = [seq2seq_example(data[d, "train"], i) for d in DOMAINS for i in range(len(data[d, "train"]))]
    metrics: dict = {
        "config": repo_relative(asdict(cfg)),
        "torch": torch.__version__,
        "train_records": len(train),
    }
    shapes = {
        "teacher": (
            cfg.teacher_layers,
            cfg.teacher_d_model,
            cfg.teacher_d_ff,
            cfg.teacher_steps,
            cfg.teacher_lr,
        ),
        "draft": (cfg.draft_layers, cfg.draft_d_model, cfg.draft_d_ff, cfg.draft_steps, cfg.draft_lr),
    }
    staging = work / "pair"
    for offset, (name, (layers, d_model, d_ff, steps, lr)) in enumerate(shapes.items()):
        torch.manual_seed(cfg.seed + offset)
        model = make_t5(tok, layers, d_model, d_ff, cfg.heads)
        metrics[name] = {"parameters": num_params(model)}
        metrics[name] |= train_lm(model, train, steps, cfg.batch_size, lr, cfg.warmup_steps, cfg.seed, name,
                                  checkpoint=work / f"{name}.pt", checkpoint_every=cfg.checkpoint_every,
                                  bf16_autocast=cfg.bf16_autocast)  # fmt: skip
        model.to(torch.bfloat16).save_pretrained(staging / name)
        tok.save_pretrained(staging / name)

    (staging / "build_metrics.json").write_text(json.dumps(metrics, indent=1, ensure_ascii=False) + "\n")
    evaluate_pair(cfg, staging, data)
    out.mkdir(parents=True, exist_ok=True)
    for name in (*shapes, "build_metrics.json"):  # keeps other files in out (the model card)
        if (out / name).is_dir():
            shutil.rmtree(out / name)
        (staging / name).rename(out / name)
    shutil.rmtree(work)
    return json.loads((out / "build_metrics.json").read_text())


def main() -> None:
    (cfg,) = HfArgumentParser(T5BuildConfig).parse_args_into_dataclasses()
    metrics = build(cfg)
    for d, losses in metrics["eval_answer_loss"].items():
        print(f"{d:8s} eval answer loss: teacher {losses['teacher']:.3f}  draft {losses['draft']:.3f}  "
              f"Standard alpha {format_alpha(metrics['standard_alpha'][d])}")  # fmt: skip
    for d, samples in metrics["teacher_samples"].items():
        print(f"--- {d}: {samples[0]['query']!r}\n    teacher: {samples[0]['teacher']!r}")


if __name__ == "__main__":
    main()
