"""Headroom check: a short offline distillation of the demo draft on one domain's teacher outputs.

1. The teacher answers `--num_train` train queries of `--domain` greedily (sample source
   "teacher"); the answers are saved to `{out_dir}/teacher_outputs.json`.
2. The draft is trained on prompt + teacher answer with forward KL(p_teacher || q_draft) over
   the answer tokens, against the teacher's full distributions (a plain loop; the
   `osd.distill` Trainer does the same at scale).
3. Greedy Standard alpha (gamma 5, the engine) on the domain's eval prompts, before and after.
The distilled draft (with the tokenizer) is saved to `{out_dir}`.

Usage:
    python -m osd.demo.headroom --num_train 100                    # math, the demo pair
    python -m osd.demo.headroom --domain sql --steps 200 --out_dir outputs/demo_distilled_draft_sql
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm
from transformers import HfArgumentParser

from osd.alpha import format_alpha
from osd.conversations import load_conversations, save_conversations, user_query
from osd.distill.lm_training import IGNORE, chat_example, collate, lr_at
from osd.models import load_demo_pair
from osd.paths import DOMAINS, DRAFT_PATH, REPO_ROOT, TARGET_PATH, workload_path
from osd.prompting import encode_prompt
from osd.spec import measure_acceptance
from osd.spec.evaluate import target_only_greedy
from osd.spec.gamma import DEFAULT as GAMMA_DEFAULT
from osd.spec.gamma import NEEDS_PROPOSALS, parse_gamma
from osd.user_errors import run_main


@dataclass
class HeadroomConfig:
    domain: str = field(default="math", metadata={"help": f"Domain to distil on, one of {DOMAINS}."})
    draft: str = field(default=str(DRAFT_PATH), metadata={"help": "Draft to start from."})
    target: str = field(default=str(TARGET_PATH), metadata={"help": "Teacher (target) model."})
    out_dir: str = field(
        default=str(REPO_ROOT / "outputs" / "demo_distilled_draft"),
        metadata={"help": "Where the distilled draft goes."},
    )
    num_train: int = field(default=400, metadata={"help": "Train queries the teacher answers."})
    num_eval: int = field(default=40, metadata={"help": "Eval prompts for alpha before/after (0 = all)."})
    steps: int = field(default=150, metadata={"help": "Distillation steps."})
    batch_size: int = field(default=16, metadata={"help": "Sequences per step."})
    lr: float = field(default=1e-3, metadata={"help": "Peak learning rate (warmup 10 steps, cosine decay)."})
    gamma: int = field(
        default=GAMMA_DEFAULT,
        metadata={"help": "Draft tokens per step when measuring alpha.", "aliases": ["--max_propose_num"]},
    )
    max_new_tokens: int = field(default=96, metadata={"help": "Teacher answer / SD generation budget."})
    seed: int = field(default=0, metadata={"help": "Seed for batch order."})

    def __post_init__(self) -> None:
        if self.domain not in DOMAINS:
            raise ValueError(f"--domain {self.domain!r}: expected one of {DOMAINS}")
        parse_gamma(self.gamma, "--gamma", plain_decoding=NEEDS_PROPOSALS)


def forward_kl(
    draft_logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor
) -> torch.Tensor:
    """Mean over label tokens of KL(p_teacher || q_draft); logits [B, T, V], labels [B, T] (IGNORE = skip)."""
    mask = labels[:, 1:] != IGNORE  # [B, T-1]: position t predicts token t+1
    log_q = F.log_softmax(draft_logits[:, :-1][mask], dim=-1)  # [N, V]
    log_p = F.log_softmax(teacher_logits[:, :-1][mask], dim=-1)  # [N, V]
    return (log_p.exp() * (log_p - log_q)).sum(-1).mean()


def main() -> None:
    (cfg,) = HfArgumentParser(HeadroomConfig).parse_args_into_dataclasses()
    torch.set_num_threads(1)  # fastest for these tiny models on a shared CPU
    out_dir = Path(cfg.out_dir)
    draft, teacher, tok = load_demo_pair(
        cfg.draft, cfg.target, draft_dtype=torch.float32
    )  # trains: fp32 weights
    train = load_conversations(workload_path(cfg.domain, "train"))[: cfg.num_train]
    evals = load_conversations(workload_path(cfg.domain, "eval"))
    evals = evals[: cfg.num_eval] if cfg.num_eval else evals
    eval_prompts = [encode_prompt(tok, user_query(r)) for r in evals]

    def alpha() -> float | None:
        stats = measure_acceptance(draft, teacher, eval_prompts, gamma=cfg.gamma, max_new_tokens=cfg.max_new_tokens,
                                   eos_token_id=tok.eos_token_id, progress=True)  # fmt: skip
        return stats.alpha

    alpha_before = alpha()
    print(f"[{cfg.domain}] Standard alpha before distillation: {format_alpha(alpha_before)}")

    distilled = []
    for rec in tqdm(train, desc="teacher answers"):
        ids = torch.tensor([encode_prompt(tok, user_query(rec))])  # [1, T]
        answer = target_only_greedy(teacher, ids, cfg.max_new_tokens, tok.eos_token_id)
        text = tok.decode(answer, skip_special_tokens=True)
        distilled.append(
            {**rec, "conversation": [rec["conversation"][0], {"role": "assistant", "content": text}]}
        )
    save_conversations(distilled, out_dir / "teacher_outputs.json")

    examples = [chat_example(tok, r, 192) for r in distilled]
    rng = random.Random(cfg.seed)
    opt = torch.optim.AdamW(draft.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    draft.train()
    start, order = time.time(), []
    for step in tqdm(range(cfg.steps), desc="distilling"):
        if len(order) < cfg.batch_size:
            order += rng.sample(range(len(examples)), len(examples))
        batch = collate([examples[i] for i in order[: cfg.batch_size]], tok.pad_token_id)
        del order[: cfg.batch_size]
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg.steps, cfg.lr, 10)
        with torch.no_grad():
            teacher_logits = teacher(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
            ).logits
        draft_logits = draft(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        loss = forward_kl(draft_logits, teacher_logits, batch["labels"])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 25 == 0 or step == cfg.steps - 1:
            tqdm.write(f"step {step + 1}: forward KL {loss.item():.3f}")
    draft.eval()
    train_seconds = time.time() - start

    alpha_after = alpha()
    draft.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    if (Path(cfg.target) / "tokenizer.model").exists():  # a SentencePiece model, for llama.cpp's converter
        (out_dir / "tokenizer.model").write_bytes((Path(cfg.target) / "tokenizer.model").read_bytes())
    # None where nothing was proposed (every answer a single token)
    gain = None if alpha_before is None or alpha_after is None else alpha_after - alpha_before
    result = {"domain": cfg.domain, "alpha_before": alpha_before, "alpha_after": alpha_after,
              "gain": gain, "steps": cfg.steps, "num_train": len(train),
              "num_eval": len(evals), "train_seconds": train_seconds}  # fmt: skip
    (out_dir / "headroom.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"[{cfg.domain}] alpha {format_alpha(alpha_before)} -> {format_alpha(alpha_after)} "
          f"({format_alpha(gain, '+.3f')}); draft saved to {out_dir}")  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(run_main(main, "osd.demo.headroom"))
