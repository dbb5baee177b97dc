"""Build the Standard head: an EAGLE-3 head (`osd.spec.eagle3`) distilled from the target on general queries.

Built as the Standard draft is (`osd.demo.build_draft`, `osd.demo.general_corpus`): the general corpus the target
wrote itself (queries from its chat template's user prefix, its greedy answers; never the workload, checked and
recorded), the sub-vocabulary of its most frequent answer tokens, seeded, resumable, written atomically.

Teacher. Each example runs through the target once, teacher-forced, in bf16 as it serves, before training starts
(a resumed build computes only those not yet kept): its input states at the head's three layers [S - 1, 3H] (what verification keeps while serving) and its
final normed states at the answer positions [W, H] are kept in `{out_dir}.build/teacher/{i}.pt` (bf16). The target's
logits on V' are those final states times its output embedding's rows at V': the full distribution on V', not a
top-K.

Training. `osd.online.head_loss.head_distillation_loss`: EAGLE-3's training-time test over --ttt_steps chain steps,
forward KL to the target renormalised on V', at the answer positions; AdamW with warmup and cosine decay over
seeded shuffled epochs (`osd.distill.lm_training.train_lm`; its state in `{out_dir}.build/state.pt`, deleted once the
head is written: rerunning the command after a kill continues with the batches the uninterrupted run would have
used, and a larger --steps given to a build not yet finished stretches its schedule). Initialised as the speculators trainer does: `lm_head` from the target's
output embedding at V', and `norm` from the target's final norm, so that the head starts from the target's readout.

Usage:
    python -m osd.demo.build_head --num_threads 2    # osd/demo/models/head/
    python -m osd.demo.build_head --target osd/demo/models/tiny/teacher --out_dir /tmp/head --steps 6
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM, HfArgumentParser, PreTrainedModel

from osd.demo.general_corpus import (
    GeneralBuildConfig,
    build_folder,
    general_token_ids,
    load_general_corpus,
    publish,
)
from osd.demo.target import ensure_if_demo_target
from osd.distill.lm_training import IGNORE, BatchLoss, Example, num_params, save_atomically, train_lm
from osd.distill.losses import forward_kl
from osd.online.head_loss import FeatureQuery, head_distillation_loss
from osd.paths import HEAD_PATH
from osd.spec.cached_model import layer_inputs
from osd.spec.eagle3 import Eagle3Head, save_head
from osd.user_errors import run_main


@dataclass
class HeadBuildConfig(GeneralBuildConfig):
    out_dir: str = field(default=str(HEAD_PATH), metadata={"help": "Folder for the finished head."})
    steps: int = field(
        default=6000, metadata={"help": "Optimizer steps (8 epochs of the 3000-answer corpus)."}
    )
    batch_size: int = field(default=4, metadata={"help": "Examples per step."})
    lr: float = field(default=1e-3, metadata={"help": "Peak learning rate."})
    warmup_steps: int = field(default=10, metadata={"help": "Linear warmup, then cosine decay to 10%%."})
    checkpoint_every: int = field(default=50, metadata={"help": "Steps between resumable checkpoints."})
    bf16_autocast: bool = field(
        default=True,
        metadata={
            "help": "bf16 matmuls, float32 weights and optimizer (slower on CPUs without bf16 instructions)."
        },
    )
    ttt_steps: int = field(
        default=3,
        metadata={"help": "Chain steps of the training-time test (EAGLE-3; speculators' default 3)."},
    )
    ttt_decay: float = field(default=1.0, metadata={"help": "Weight decay**s of chain step s in the loss."})
    log_every: int = field(default=5, metadata={"help": "Steps between progress lines."})


@torch.no_grad()
def teacher_states(
    target: PreTrainedModel, layers: Sequence[int], example: Example
) -> dict[str, torch.Tensor]:
    """One teacher-forced target pass over an example: its tokens [S], the states the head reads [S - 1, K H], the
    answer positions [W] (indices into tokens, each >= 2) and the final normed states [W, H] whose logits produced
    the tokens there."""
    ids, labels = example
    tokens = torch.tensor(ids)  # [S]
    positions = torch.tensor([p for p in range(2, len(ids)) if labels[p] != IGNORE], dtype=torch.long)  # [W]
    out = target(input_ids=tokens[None, :-1].to(target.device), output_hidden_states=True, use_cache=False)
    features = layer_inputs(out.hidden_states, tuple(layers))[0]  # [S - 1, K H]
    final = out.hidden_states[-1][0, positions - 1]  # [W, H] (after the final norm)
    return {"tokens": tokens, "features": features.to(torch.bfloat16).cpu(), "positions": positions,
            "final": final.to(torch.bfloat16).cpu()}  # fmt: skip


@dataclass
class TeacherCache:
    """`teacher_states` of each example, computed the first time it is asked for and kept in `folder`."""

    target: PreTrainedModel
    layers: tuple[int, ...]
    examples: list[Example]
    folder: Path

    def __call__(self, index: int) -> dict[str, torch.Tensor]:
        path = self.folder / f"{index}.pt"
        if path.exists():
            return torch.load(path)
        states = teacher_states(self.target, self.layers, self.examples[index])
        self.folder.mkdir(parents=True, exist_ok=True)
        save_atomically(states, path)
        return states

    def fill(self) -> None:
        """Compute the states of every example not yet kept (the build's one pass of the target, before training:
        each epoch then costs the head alone)."""
        missing = [i for i in range(len(self.examples)) if not (self.folder / f"{i}.pt").exists()]
        for index in tqdm(missing, desc="teacher states", unit="example", mininterval=10):
            self(index)


def init_head(target: PreTrainedModel, token_ids: list[int] | None, seed: int) -> Eagle3Head:
    """A float32 head for `target` whose readout is the target's: lm_head = its output embedding's rows at V', norm
    = its final norm (the speculators trainer copies the former)."""
    head = Eagle3Head.for_target(target, token_ids, seed).float()
    with torch.no_grad():
        head.lm_head.weight.copy_(target.get_output_embeddings().weight[head.token_ids])
        head.norm.weight.copy_(target.model.norm.weight)
    return head


def head_batch_loss(cfg: HeadBuildConfig, target: PreTrainedModel, teacher: TeacherCache) -> BatchLoss:
    """(head, example indices) -> (the training-time test's loss, back-propagated query by query; answer positions)."""
    embed, readout = target.get_input_embeddings(), target.get_output_embeddings().weight
    loss_fn = partial(head_distillation_loss, embed=embed, divergence=forward_kl, steps=cfg.ttt_steps,
                      decay=cfg.ttt_decay)  # fmt: skip

    def loss(head: Eagle3Head, indices: list[int]) -> tuple[torch.Tensor, int]:
        rows = readout[head.token_ids.to(readout.device)]  # [V', H]
        queries = []
        for index in indices:
            states = teacher(index)
            with torch.no_grad():
                logits = states["final"].to(rows) @ rows.T  # [W, V'] the target's logits on V'
            queries.append(FeatureQuery(states["tokens"], states["features"], states["positions"], logits))
        total = loss_fn(head, queries, torch.Tensor.backward)
        assert total is not None, f"no answer position in examples {indices}"
        return total, sum(len(q.positions) for q in queries)

    return loss


def build(cfg: HeadBuildConfig) -> dict:
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    start = time.time()
    ensure_if_demo_target(cfg.target)
    work = build_folder(cfg)
    tok, examples, metrics = load_general_corpus(cfg)
    examples = [e for e in examples if any(y != IGNORE for y in e[1][2:])]  # an answer token to predict
    target = AutoModelForCausalLM.from_pretrained(cfg.target, dtype=torch.bfloat16).eval()
    token_ids, coverage = general_token_ids(cfg, tok) if cfg.draft_vocab_size else (None, 1.0)
    head = init_head(target, token_ids, cfg.seed)
    teacher = TeacherCache(target, head.target_layers, examples, work / "teacher")
    teacher.fill()
    metrics |= {"draft_vocab_coverage": coverage, "target_layers": list(head.target_layers),
                "parameters": num_params(head), "train_examples": len(examples)}  # fmt: skip
    metrics |= train_lm(head, examples, cfg.steps, cfg.batch_size, cfg.lr, cfg.warmup_steps, cfg.seed, "head",
                        checkpoint=work / "state.pt", checkpoint_every=cfg.checkpoint_every,
                        bf16_autocast=cfg.bf16_autocast, batch_loss=head_batch_loss(cfg, target, teacher),
                        log_every=cfg.log_every)  # fmt: skip
    metrics |= {
        "epochs": cfg.steps * cfg.batch_size / len(examples),
        "build_seconds_this_run": time.time() - start,
    }
    head = head.to(torch.bfloat16)  # served in bf16; no tokenizer: a head has its target's
    publish(cfg, partial(save_head, head, target=target), metrics)
    return metrics


def main() -> None:
    (cfg,) = HfArgumentParser(HeadBuildConfig).parse_args_into_dataclasses()
    metrics = build(cfg)
    print(
        f"head: {metrics['parameters'] / 1e6:.2f}M parameters, final train loss {metrics['final_train_loss']:.3f}, "
        f"{metrics['epochs']:.2f} epochs; overlap with the workload: {metrics['overlap_with_workload']}"
    )


if __name__ == "__main__":
    raise SystemExit(run_main(main, "osd.demo.build_head"))
