r"""Several drafts, one per query class, each distilled online on its own queries (the paper's Fig. 6).

A router names the draft that serves a query: `field_router("topic")` reads a record field
(dataset, topic or language), `classifier_router(fn)` applies fn to the query's prompt text.
Each draft has its own buffer and takes an update after every --online_update_interval queries
it served; the others are untouched (they receive no gradient, and an optimizer step leaves a
parameter without one unchanged). One optimizer holds all drafts' parameters.

    drafts = RoutedDrafts({name: copy.deepcopy(student) for name in ("gsm8k", "spider")})
    trainer = RoutedOnlineDistillTrainer(model=drafts, router=field_router("dataset"),
                                         teacher_model=teacher, args=args, train_dataset=stream, ...)

Checkpoints hold one Hugging Face model folder per draft (`checkpoint-N/{route}/`), loadable
with `from_pretrained`, and resume like any online run.

Command line: every flag of `osd.train` (--mode is online), plus --route_by and --routes:

    python -m osd.distill.routing --route_by topic --student_model_path JackFram/llama-160m \
        --teacher_model_path lmsys/vicuna-7b-v1.3 --data_path data/arena/mix_topics.json \
        --output_dir runs/arena_routed --per_device_train_batch_size 1 --learning_rate 1e-5 \
        --lr_scheduler_type constant --online_update_interval 1 --online_eval_interval 1 --report_to wandb
"""

from __future__ import annotations

import copy
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.trainer import TRAINING_ARGS_NAME

from osd.conversations import GROUP_FIELDS
from osd.distill.callbacks import setup_wandb
from osd.distill.config import DataArguments, DistillTrainingArguments, ModelArguments
from osd.distill.experiment import build_trainer, dataset_loader, train_planned
from osd.distill.flags import parse_train_args
from osd.distill.online import OnlineDistillTrainer
from osd.distill.run_dir import open_run, run_identity
from osd.models import load_models
from osd.spec.weight_major import use_weight_major_linears
from osd.user_errors import run_main

Router = Callable[[dict[str, str], str], str]  # (group fields, prompt text) -> route name


def field_router(field: str) -> Router:
    """Route by a record field (`dataset`, `topic` or `language`)."""

    def route(groups: dict[str, str], prompt: str) -> str:
        if field not in groups:
            raise ValueError(
                f"routing by '{field}': a stream record has no '{field}' field (it has {sorted(groups)})"
            )
        return groups[field]

    return route


def classifier_router(classify: Callable[[str], str]) -> Router:
    """Route by a classifier of the prompt text (e.g. a topic or language-id model)."""
    return lambda groups, prompt: classify(prompt)


class RoutedDrafts(nn.Module):
    """The drafts of a routed run, by route name; Trainer trains them as one module."""

    def __init__(self, drafts: dict[str, PreTrainedModel]) -> None:
        super().__init__()
        if not drafts:
            raise ValueError("RoutedDrafts needs at least one draft")
        self.drafts = nn.ModuleDict(drafts)

    @classmethod
    def copies(cls, draft: PreTrainedModel, routes: list[str]) -> RoutedDrafts:
        """One independent copy of `draft` per route (all start from the same weights)."""
        return cls({route: copy.deepcopy(draft) for route in routes})

    @property
    def config(self):
        """The first draft's config (DistillTrainer checks the vocabulary; all drafts share one)."""
        return next(iter(self.drafts.values())).config

    def get_output_embeddings(self) -> nn.Module:
        """The first draft's head (DistillTrainer reads its sub-vocabulary token set; all drafts share one)."""
        return next(iter(self.drafts.values())).get_output_embeddings()

    def forward(self, *args, **kwargs):
        raise TypeError("RoutedDrafts has no forward: pick a draft with drafts[route]")


class RoutedOnlineDistillTrainer(OnlineDistillTrainer):
    """OnlineDistillTrainer whose queries are served and distilled by the draft their router picks."""

    def __init__(self, *args, router: Router, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(self.model, RoutedDrafts):
            raise TypeError(
                f"RoutedOnlineDistillTrainer trains a RoutedDrafts model, got {type(self.model).__name__}"
            )
        self.router = router

    def drafts(self) -> dict[str, PreTrainedModel]:
        return dict(self.accelerator.unwrap_model(self.model).drafts)

    def route(self, prompt_ids: list[int], groups: dict[str, str]) -> str:
        drafts = self.accelerator.unwrap_model(self.model).drafts
        route = self.router(groups, self.processing_class.decode(prompt_ids, skip_special_tokens=True))
        if route not in drafts:
            raise ValueError(f"the router chose draft '{route}', but the drafts are {list(drafts)}")
        return route

    def evaluate(self, *args, **kwargs) -> dict[str, float]:
        raise ValueError(
            "a routed run measures alpha on the stream it serves (alpha/{field}/{value} in its logs); "
            "run it with --eval_strategy no and --eval_on_start False, and evaluate each draft folder on its own"
        )

    # private, but what save_model and checkpoints call to write the model: one folder per draft
    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        """Each draft as its own Hugging Face model folder (plus the tokenizer and training args)."""
        output_dir = Path(output_dir or self.args.output_dir)
        if not self.args.should_save:
            return
        for route, draft in self.accelerator.unwrap_model(self.model).drafts.items():
            draft.save_pretrained(output_dir / route)
            if self.processing_class is not None:
                self.processing_class.save_pretrained(output_dir / route)
        torch.save(self.args, os.path.join(output_dir, TRAINING_ARGS_NAME))

    # private, but what resuming calls to load the model: one folder per draft
    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: nn.Module | None = None) -> None:
        drafts = self.accelerator.unwrap_model(model or self.model).drafts
        for route, draft in drafts.items():
            folder = Path(resume_from_checkpoint) / route
            if not folder.is_dir():
                raise ValueError(
                    f"{resume_from_checkpoint}: no folder for draft '{route}'; was it a routed run?"
                )
            saved = type(draft).from_pretrained(folder, dtype=draft.dtype)
            draft.load_state_dict(saved.state_dict())


@dataclass
class RoutingArguments:
    route_by: str = field(
        default="topic", metadata={"help": f"Record field that picks the draft, one of {list(GROUP_FIELDS)}."}
    )
    routes: list[str] | None = field(
        default=None,
        metadata={"help": "Route names, one draft each (default: every value of --route_by in the stream)."},
    )

    def __post_init__(self) -> None:
        if self.route_by not in GROUP_FIELDS:
            raise ValueError(f"--route_by must be one of {list(GROUP_FIELDS)}, got {self.route_by!r}")


def main(argv: list[str] | None = None) -> None:
    """Online distillation with one draft per --route_by value, every draft starting from --student_model_path."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run_routed(
        *parse_train_args(sys.argv[1:] if argv is None else argv, (RoutingArguments,), "osd.distill.routing")
    )


def run_routed(
    model_args: ModelArguments,
    data_args: DataArguments,
    args: DistillTrainingArguments,
    routing: RoutingArguments,
) -> None:
    """`main` from typed arguments: one online draft per --route_by value, trained into --output_dir."""
    if args.drafter != "model":
        raise ValueError(
            "osd.distill.routing routes draft models; an EAGLE-3 head learns in osd.train --mode online"
        )
    setup_wandb(args.report_to)
    args.mode, args.eval_on_start, args.eval_strategy = "online", False, "no"
    identity = run_identity(model_args, data_args, args, route_by=routing.route_by, routes=routing.routes)
    with open_run(model_args, data_args, args, identity) as plan:  # refuses before models load
        tokenizer, student, teacher = load_models(model_args)
        use_weight_major_linears(teacher)  # as osd.distill.experiment.run: the run's own target, opt-in
        stream = dataset_loader(data_args, tokenizer, student, teacher, args.max_new_tokens)(
            data_args.data_path, data_args.max_train_samples, data_args.data_split
        )
        values = stream.items[routing.route_by]  # None where a record lacks the field
        routes = routing.routes or list(dict.fromkeys(v for v in values if v is not None))
        if not routes:
            raise ValueError(f"{data_args.data_path}: no record has a '{routing.route_by}' field to route by")
        trainer = build_trainer(
            args, student, teacher, tokenizer, stream,
            model_max_length=data_args.model_max_length,
            trainer_class=RoutedOnlineDistillTrainer,
            model=RoutedDrafts.copies(student, routes),
            router=field_router(routing.route_by),
            run_identity=identity,
            run_info={
                "student_model_path": model_args.student_model_path,
                "data_path": data_args.data_path,
                "route_by": routing.route_by,
            },
        )  # fmt: skip
        train_planned(trainer, plan)


if __name__ == "__main__":
    raise SystemExit(run_main(main, "osd.distill.routing"))
