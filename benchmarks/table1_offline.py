"""Table-1 analogue: alpha of Standard SD and after offline distillation, 4 sample sources x 3 losses.

On one domain of the local workload with the embedded demo pair (osd.demo), CPU, no downloads:
1. the teacher's greedy answers to the first `max_steps * batch_size` training queries are
   generated once (what data/generate_answer.py writes for the real datasets);
2. "Standard": alpha of the undistilled draft on the domain's eval queries;
3. for each --sample_source in {teacher, student, mix_request, mix_token} and each --kl_method in
   {forward, reverse, jsd}: a fresh copy of the draft takes `max_steps` DistillTrainer steps, then
   alpha is measured again (greedy, gamma = --max_propose_num).
Writes `{out_dir}/table1_offline_{domain}.{md,json}` and prints the table.

Usage:
    python benchmarks/table1_offline.py                                   # demo pair, domain sql
    nice -n 10 python benchmarks/table1_offline.py --domain math --max_steps 30 --max_eval_samples 40  # quicker
    python benchmarks/table1_offline.py --draft_path D --teacher_path T --train_path a.json --eval_path b.json
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, HfArgumentParser

from osd.conversations import load_conversations, save_conversations, user_query
from osd.distill.config import SAMPLE_SOURCES, DistillTrainingArguments
from osd.distill.data import ConversationDataset, DistillCollator, pad
from osd.distill.sources import SamplingConfig, generate_mixed
from osd.distill.trainer import DistillTrainer

KL_METHODS = ("forward", "reverse", "jsd")


@dataclass
class Table1Args:
    domain: str = field(
        default="sql", metadata={"help": "Workload domain: data/local/{domain}_{train,eval}.json."}
    )
    draft_path: str | None = field(default=None, metadata={"help": "Student; default: the demo draft."})
    teacher_path: str | None = field(default=None, metadata={"help": "Teacher; default: the demo target."})
    teacher_dtype: str = field(
        default="bfloat16", metadata={"help": "The teacher's dtype (the student trains in float32)."}
    )
    train_path: str | None = field(
        default=None, metadata={"help": "Default: data/local/{domain}_train.json."}
    )
    eval_path: str | None = field(default=None, metadata={"help": "Default: data/local/{domain}_eval.json."})
    out_dir: str = field(
        default="benchmarks/results", metadata={"help": "Where the table (.md, .json) goes."}
    )
    work_dir: str = field(
        default="runs/table1_offline",
        metadata={"help": "Teacher answers and one output_dir per run (metrics.jsonl)."},
    )
    max_steps: int = field(default=60, metadata={"help": "Optimizer steps per distillation run."})
    batch_size: int = field(default=8, metadata={"help": "Prompts per step."})
    learning_rate: float = field(default=1e-4, metadata={"help": "AdamW learning rate (constant)."})
    max_new_tokens: int = field(
        default=48, metadata={"help": "Tokens generated per sample and per eval query."}
    )
    max_eval_samples: int = field(default=80, metadata={"help": "Eval queries for alpha."})
    max_propose_num: int = field(default=5, metadata={"help": "gamma."})
    model_max_length: int = field(default=256, metadata={"help": "Prompt + response length cap."})
    num_threads: int = field(
        default=1,
        metadata={"help": "torch CPU threads; 1 avoids oversubscription slowdowns on a shared CPU."},
    )
    seed: int = field(default=0, metadata={"help": "Seed for the sample sources and training."})


def teacher_answers(args: Table1Args, teacher, tokenizer, out: Path) -> Path:
    """The teacher's greedy answers to the training queries used, as a conversation file."""
    records = load_conversations(args.train_path)[: args.max_steps * args.batch_size]
    dataset = ConversationDataset(args.train_path, tokenizer, args.model_max_length)
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
        max_grad_norm=1.0,  # the recorded table clipped at HF's 1.0 (the default before issue 13; the reference: 0)
        max_new_tokens=args.max_new_tokens,
        max_propose_num=args.max_propose_num,
        eval_on_start=False,  # Standard is measured once for the whole table
        save_strategy="no",
        logging_steps=max(1, args.max_steps // 4),
        report_to="none",
        seed=args.seed,
        disable_tqdm=True,
    )
    return DistillTrainer(
        model=copy.deepcopy(draft),
        teacher_model=teacher,
        args=training,
        train_dataset=train,
        eval_dataset=evalset,
        data_collator=DistillCollator(tokenizer.pad_token_id, max_length=args.model_max_length),
        processing_class=tokenizer,
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
    from osd.demo import repo_relative

    alpha = {(r["sample_source"], r["kl_method"]): r["alpha"] for r in rows}
    lines = [
        f"Offline distillation on the `{args.domain}` domain: eval alpha (greedy, gamma={args.max_propose_num}, "
        f"{num_eval} eval queries, {args.max_new_tokens} new tokens), "
        f"{args.max_steps} steps x {args.batch_size} prompts, lr {args.learning_rate}.",
        f"Draft {repo_relative(args.draft_path)} (weights sha256 {digests['draft_sha256']}), "
        f"teacher {repo_relative(args.teacher_path)} ({digests['teacher_sha256']}).",
        "",
        f"Standard (undistilled draft): alpha = {standard['alpha']:.3f}, "
        f"accepted length = {standard['accepted_length']:.2f}",
        "",
        "| sample source | " + " | ".join(KL_METHODS) + " |",
        "|---|" + "---|" * len(KL_METHODS),
    ]
    for source in SAMPLE_SOURCES:
        cells = [
            f"{alpha[source, kl]:.3f} ({alpha[source, kl] - standard['alpha']:+.3f})" for kl in KL_METHODS
        ]
        lines.append(f"| {source} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict]:
    (args,) = HfArgumentParser(Table1Args).parse_args_into_dataclasses(args=argv)
    from osd.demo import DRAFT_PATH, TARGET_PATH, repo_relative, workload_path
    from osd.demo.target import ensure_target

    args.draft_path = args.draft_path or str(DRAFT_PATH)
    args.teacher_path = args.teacher_path or str(ensure_target(TARGET_PATH))
    args.train_path = args.train_path or str(workload_path(args.domain, "train"))
    args.eval_path = args.eval_path or str(workload_path(args.domain, "eval"))
    out, work = Path(args.out_dir), Path(args.work_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.num_threads)
    tokenizer = AutoTokenizer.from_pretrained(args.teacher_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.unk_token or tokenizer.eos_token
    draft = AutoModelForCausalLM.from_pretrained(args.draft_path, dtype=torch.float32).eval()
    teacher = AutoModelForCausalLM.from_pretrained(
        args.teacher_path, dtype=getattr(torch, args.teacher_dtype)
    ).eval()

    digests = {
        "draft_sha256": weights_digest(args.draft_path),
        "teacher_sha256": weights_digest(args.teacher_path),
    }
    start = time.time()
    train_path = teacher_answers(args, teacher, tokenizer, work)
    print(f"teacher answers: {train_path} ({time.time() - start:.0f} s)", flush=True)
    train = ConversationDataset(train_path, tokenizer, args.model_max_length)
    evalset = ConversationDataset(
        args.eval_path, tokenizer, args.model_max_length, max_samples=args.max_eval_samples
    )

    models = (draft, teacher, tokenizer, train, evalset, work)
    metrics = make_trainer(args, "teacher", "forward", *models).evaluate()
    standard = {"alpha": metrics["eval_alpha"], "accepted_length": metrics["eval_accepted_length"]}
    print(f"Standard: {standard}", flush=True)
    rows = []
    for source in SAMPLE_SOURCES:
        for kl in KL_METHODS:
            rows.append(distil_and_measure(make_trainer(args, source, kl, *models)))
            print(json.dumps(rows[-1]), flush=True)
    table = markdown(args, len(evalset), digests, standard, rows)
    (out / f"table1_offline_{args.domain}.md").write_text(table)
    result = {
        "args": asdict(args),
        **digests,
        "standard": standard,
        "runs": rows,
        "wall_s": round(time.time() - start),
    }
    (out / f"table1_offline_{args.domain}.json").write_text(
        json.dumps(repo_relative(result), indent=1) + "\n"
    )
    print(table)
    return rows


if __name__ == "__main__":
    main()
