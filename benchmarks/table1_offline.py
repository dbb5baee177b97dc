"""Table-1 analogue: alpha of Standard SD and after offline distillation, 4 sample sources x 5 losses.

On one domain of the local workload, CPU, no downloads, with the decoder-only demo pair (`--pair
decoder`: SmolLM2-135M-Instruct and its draft) or the encoder-decoder one (`--pair t5`:
osd/demo/models/t5, `tests.builders.build_t5_pair`), or any pair given by path:
1. the teacher's greedy answers to the first `max_steps * batch_size` training queries are
   generated once (what data/generate_answer.py writes for the real datasets);
2. "Standard": alpha of the undistilled draft on the domain's eval queries;
3. for each --sample_sources entry (teacher, student, mix_request, mix_token) and each --kl_methods
   entry (forward, reverse, jsd, reference_mix, tvd): a fresh copy of the draft takes `max_steps`
   DistillTrainer steps, then alpha is measured again (greedy, gamma = --max_propose_num).
Writes `{out_dir}/{name}.{md,json,png}` (the JSON with the command that wrote it; the PNG a
heatmap of alpha per cell) and prints the table.

Usage:
    python benchmarks/table1_offline.py                                   # decoder demo pair, domain sql
    python benchmarks/table1_offline.py --pair t5 --domain math           # the T5 demo pair
    python benchmarks/table1_offline.py --max_steps 8 --sample_sources teacher --kl_methods forward tvd
    python benchmarks/table1_offline.py --pair t5 --name table1_v2_t5_sql --plot_only   # redraw a recorded grid
    python benchmarks/table1_offline.py --draft_path D --teacher_path T --train_path a.json --eval_path b.json
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import HfArgumentParser

from osd.conversations import load_conversations, save_conversations, user_query
from osd.distill.config import SAMPLE_SOURCES, DistillTrainingArguments
from osd.distill.data import ConversationDataset, pad
from osd.distill.experiment import build_trainer
from osd.distill.sources import SamplingConfig, generate_mixed
from osd.distill.trainer import DistillTrainer
from osd.models import load_model, load_tokenizer
from osd.spec.gamma import DEFAULT as GAMMA_DEFAULT
from osd.spec.gamma import NEEDS_PROPOSALS, parse_gamma
from osd.user_errors import run_main

KL_METHODS = ("forward", "reverse", "jsd", "reference_mix", "tvd")  # the paper's columns + ours
PAIRS = ("decoder", "t5")


@dataclass
class Table1Args:
    domain: str = field(
        default="sql", metadata={"help": "Workload domain: data/local/{domain}_{train,eval}.json."}
    )
    pair: str = field(
        default="decoder",
        metadata={
            "help": f"{list(PAIRS)}: the default draft and teacher (the decoder-only demo pair, or the T5 one)."
        },
    )
    draft_path: str | None = field(default=None, metadata={"help": "Student; default: --pair's draft."})
    teacher_path: str | None = field(default=None, metadata={"help": "Teacher; default: --pair's teacher."})
    sample_sources: list[str] = field(
        default_factory=lambda: list(SAMPLE_SOURCES), metadata={"help": "Rows of the grid."}
    )
    kl_methods: list[str] = field(default_factory=lambda: list(KL_METHODS), metadata={"help": "Columns."})
    name: str | None = field(
        default=None, metadata={"help": "Output file stem; default: table1_{pair}_{domain}."}
    )
    teacher_dtype: str = field(
        default="bfloat16", metadata={"help": "The teacher's dtype (the student trains in float32)."}
    )
    train_path: str | None = field(
        default=None, metadata={"help": "Default: data/local/{domain}_train.json."}
    )
    eval_path: str | None = field(default=None, metadata={"help": "Default: data/local/{domain}_eval.json."})
    out_dir: str = field(
        default="outputs/table1",
        metadata={"help": "Where the table (.md, .json) goes (recorded ones: benchmarks/results/table1/)."},
    )
    work_dir: str = field(
        default="runs/table1_offline",
        metadata={"help": "Teacher answers and one output_dir per run (metrics.jsonl)."},
    )
    max_steps: int = field(default=60, metadata={"help": "Optimizer steps per distillation run."})
    batch_size: int = field(default=8, metadata={"help": "Prompts per step."})
    learning_rate: float = field(default=1e-4, metadata={"help": "AdamW learning rate (constant)."})
    max_grad_norm: float = field(
        default=0.0, metadata={"help": "Gradient clipping; 0 = none (the reference forced 0)."}
    )
    max_new_tokens: int = field(
        default=48, metadata={"help": "Tokens generated per sample and per eval query."}
    )
    max_eval_samples: int = field(default=80, metadata={"help": "Eval queries for alpha."})
    max_propose_num: int = field(default=GAMMA_DEFAULT, metadata={"help": "gamma."})
    model_max_length: int = field(default=256, metadata={"help": "Prompt + response length cap."})
    num_threads: int = field(
        default=1,
        metadata={"help": "torch CPU threads; 1 avoids oversubscription slowdowns on a shared CPU."},
    )
    seed: int = field(default=0, metadata={"help": "Seed for the sample sources and training."})
    plot_only: bool = field(
        default=False, metadata={"help": "Only redraw {out_dir}/{name}.png from the recorded {name}.json."}
    )

    def __post_init__(self) -> None:
        parse_gamma(self.max_propose_num, "--max_propose_num", plain_decoding=NEEDS_PROPOSALS)


def teacher_answers(args: Table1Args, teacher, tokenizer, dataset: ConversationDataset, out: Path) -> Path:
    """The teacher's greedy answers to the training queries used (prompts from `dataset`), as a conversation file."""
    records = load_conversations(args.train_path)[: args.max_steps * args.batch_size]
    config = SamplingConfig(args.max_new_tokens, 0.0, tokenizer.eos_token_id, tokenizer.pad_token_id)
    answered = []
    for start in range(0, len(records), args.batch_size):
        chunk = records[start : start + args.batch_size]
        ids, mask = pad(
            [dataset[start + i]["prompt_ids"] for i in range(len(chunk))], tokenizer.pad_token_id, "left"
        )
        for record, answer in zip(chunk, generate_mixed(None, teacher, ids, mask, 0.0, config), strict=True):
            text = tokenizer.decode(answer, skip_special_tokens=True)
            conv = [{"role": "user", "content": user_query(record)}, {"role": "assistant", "content": text}]
            answered.append({**record, "conversation": conv})
    path = out / f"{args.domain}_train_teacher_answers.json"
    save_conversations(answered, path)
    return path


def make_trainer(
    args: Table1Args, source: str, kl: str, draft, teacher, tokenizer, train, evalset, out: Path
):
    """A DistillTrainer for a fresh copy of the draft."""
    training = DistillTrainingArguments(
        output_dir=str(out / f"{source}_{kl}"),
        sample_source=source,
        kl_method=kl,
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        lr_scheduler_type="constant",
        max_grad_norm=args.max_grad_norm,
        max_new_tokens=args.max_new_tokens,
        max_propose_num=args.max_propose_num,
        eval_on_start=False,  # Standard is measured once for the whole table
        save_strategy="no",
        logging_steps=max(1, args.max_steps // 4),
        report_to="none",
        seed=args.seed,
        disable_tqdm=True,
    )
    return build_trainer(
        training, copy.deepcopy(draft), teacher, tokenizer, train, evalset, args.model_max_length
    )


def distil_and_measure(trainer: DistillTrainer) -> dict:
    start = time.time()
    trainer.train()
    train_s = time.time() - start
    metrics = trainer.evaluate()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {
        "sample_source": trainer.args.sample_source,
        "kl_method": trainer.args.kl_method,
        "alpha": metrics["eval_alpha"],
        "accepted_length": metrics["eval_accepted_length"],
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "train_s": round(train_s, 1),
    }


def weights_digest(path: str) -> str | None:
    """Short sha256 of a local model's weights: which pair the table was measured on."""
    weights = Path(path) / "model.safetensors"
    return hashlib.sha256(weights.read_bytes()).hexdigest()[:12] if weights.exists() else None


def markdown(args: Table1Args, num_eval: int, digests: dict, standard: dict, rows: list[dict]) -> str:
    from osd.paths import repo_relative

    alpha = {(r["sample_source"], r["kl_method"]): r["alpha"] for r in rows}
    lines = [
        f"Offline distillation on the `{args.domain}` domain: eval alpha (greedy, gamma={args.max_propose_num}, "
        f"{num_eval} eval queries, {args.max_new_tokens} new tokens), "
        f"{args.max_steps} steps x {args.batch_size} prompts, lr {args.learning_rate}, "
        f"max_grad_norm {args.max_grad_norm}.",
        f"Draft {repo_relative(args.draft_path)} (weights sha256 {digests['draft_sha256']}), "
        f"teacher {repo_relative(args.teacher_path)} ({digests['teacher_sha256']}).",
        "",
        f"Standard (undistilled draft): alpha = {standard['alpha']:.3f}, "
        f"accepted length = {standard['accepted_length']:.2f}",
        "",
        "| sample source | " + " | ".join(args.kl_methods) + " |",
        "|---|" + "---|" * len(args.kl_methods),
    ]
    for source in args.sample_sources:
        cells = [
            f"{alpha[source, kl]:.3f} ({alpha[source, kl] - standard['alpha']:+.3f})"
            for kl in args.kl_methods
        ]
        lines.append(f"| {source} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def heatmap(args: Table1Args, standard: dict, rows: list[dict], path: Path) -> None:
    """Alpha per (sample source, divergence), coloured by its change from Standard."""
    import matplotlib.pyplot as plt

    from osd.plots import save_figure  # it selects matplotlib's file-only backend

    alpha = {(r["sample_source"], r["kl_method"]): r["alpha"] for r in rows}
    grid = torch.tensor([[alpha[s, k] for k in args.kl_methods] for s in args.sample_sources])  # [S, K]
    delta = grid - standard["alpha"]
    span = max(float(delta.abs().max()), 1e-3)
    fig, ax = plt.subplots(figsize=(1.3 * len(args.kl_methods) + 2, 0.6 * len(args.sample_sources) + 1.6))
    image = ax.imshow(delta.numpy(), cmap="RdBu", vmin=-span, vmax=span)
    for i, source_row in enumerate(grid.tolist()):
        for j, value in enumerate(source_row):
            dark = abs(value - standard["alpha"]) > span / 2
            ax.text(
                j, i, f"{value:.3f}", ha="center", va="center", fontsize=9, color="white" if dark else "black"
            )
    ax.set_xticks(range(len(args.kl_methods)), args.kl_methods)
    ax.set_yticks(range(len(args.sample_sources)), args.sample_sources)
    ax.set_xlabel("divergence (--kl_method)")
    ax.set_ylabel("--sample_source")
    ax.set_title(
        f"{args.pair} pair, {args.domain}: alpha after distillation (Standard {standard['alpha']:.3f})"
    )
    fig.colorbar(image, ax=ax, label="alpha - Standard")
    fig.tight_layout()
    save_figure(fig, path)


def default_paths(args: Table1Args) -> None:
    """Fill in the models and data --pair and --domain name."""
    from osd.paths import DRAFT_PATH, T5_DRAFT_PATH, T5_TEACHER_PATH, TARGET_PATH, workload_path

    if args.pair not in PAIRS:
        raise ValueError(f"--pair must be one of {PAIRS}, got {args.pair!r}")
    for name, choices in (("sample_sources", SAMPLE_SOURCES), ("kl_methods", KL_METHODS)):
        unknown = set(getattr(args, name)) - set(choices)
        if unknown:
            raise ValueError(f"--{name}: unknown {sorted(unknown)}; choices {list(choices)}")
    draft, teacher = (DRAFT_PATH, TARGET_PATH) if args.pair == "decoder" else (T5_DRAFT_PATH, T5_TEACHER_PATH)
    args.draft_path = args.draft_path or str(draft)
    args.teacher_path = args.teacher_path or str(teacher)
    args.train_path = args.train_path or str(workload_path(args.domain, "train"))
    args.eval_path = args.eval_path or str(workload_path(args.domain, "eval"))
    args.name = args.name or f"table1_{args.pair}_{args.domain}"


def main(argv: list[str] | None = None) -> list[dict]:
    argv = sys.argv[1:] if argv is None else argv
    (args,) = HfArgumentParser(Table1Args).parse_args_into_dataclasses(args=argv)
    from osd.paths import repo_relative

    default_paths(args)
    out, work = Path(args.out_dir), Path(args.work_dir)
    if args.plot_only:
        recorded = json.loads((out / f"{args.name}.json").read_text())
        args = Table1Args(**{**recorded["args"], "out_dir": args.out_dir, "name": args.name})
        heatmap(args, recorded["standard"], recorded["runs"], out / f"{args.name}.png")
        return recorded["runs"]
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.num_threads)
    tokenizer = load_tokenizer(args.teacher_path, None)
    draft = load_model(args.draft_path, "float32", None).eval()
    teacher = load_model(args.teacher_path, args.teacher_dtype, None).eval()
    is_enc_dec = bool(draft.config.is_encoder_decoder)

    digests = {
        "draft_sha256": weights_digest(args.draft_path),
        "teacher_sha256": weights_digest(args.teacher_path),
    }
    start = time.time()
    prompts = ConversationDataset(args.train_path, tokenizer, args.model_max_length, is_enc_dec)
    train_path = teacher_answers(args, teacher, tokenizer, prompts, work)
    print(f"teacher answers: {train_path} ({time.time() - start:.0f} s)", flush=True)
    train = ConversationDataset(train_path, tokenizer, args.model_max_length, is_enc_dec)
    evalset = ConversationDataset(
        args.eval_path, tokenizer, args.model_max_length, is_enc_dec, max_samples=args.max_eval_samples
    )

    models = (draft, teacher, tokenizer, train, evalset, work)
    metrics = make_trainer(args, "teacher", "forward", *models).evaluate()
    standard = {"alpha": metrics["eval_alpha"], "accepted_length": metrics["eval_accepted_length"]}
    print(f"Standard: {standard}", flush=True)
    rows = []
    for source in args.sample_sources:
        for kl in args.kl_methods:
            rows.append(distil_and_measure(make_trainer(args, source, kl, *models)))
            print(json.dumps(rows[-1]), flush=True)
    table = markdown(args, len(evalset), digests, standard, rows)
    (out / f"{args.name}.md").write_text(table)
    heatmap(args, standard, rows, out / f"{args.name}.png")
    result = {
        "command": " ".join(["python benchmarks/table1_offline.py", *argv]),
        "args": asdict(args),
        **digests,
        "standard": standard,
        "runs": rows,
        "wall_s": round(time.time() - start),
    }
    (out / f"{args.name}.json").write_text(json.dumps(repo_relative(result), indent=1) + "\n")
    print(table)
    return rows


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks.table1_offline"))
