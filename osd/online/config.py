"""The online loop's settings, defined once: `OnlineArguments`.

`osd.train` (DistillTrainingArguments), `osd.serving` (ServingArguments) and the argparse tools (the
main job, `osd.analysis.online_replay`) all take these fields under these names. A tool may accept a
shorter alias (`ALIASES`) and may preset other defaults (`add_online_flags`); the meaning is the same.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields, replace
from typing import get_type_hints

from osd.user_errors import refuse_non_finite

LOSS_POSITIONS = ("wrong", "all")
SERVING_DTYPES = ("float32", "bfloat16", "float16")
DRAFTERS = ("model", "head")  # a separate draft model (the paper's), an EAGLE-3 head over the target's states
CHOICES = {
    "online_loss_positions": LOSS_POSITIONS,
    "draft_serving_dtype": SERVING_DTYPES,
    "drafter": DRAFTERS,
}

# the short names the drivers used, accepted as aliases of the full flags
ALIASES = {
    "online_update_interval": "update_interval",
    "online_steps_per_update": "steps_per_update",
    "online_replay_queries": "replay",
    "online_loss_positions": "loss_positions",
    "online_background_update": "background_update",
    "draft_serving_dtype": "draft_dtype",
}


@dataclass
class OnlineArguments:
    """What the online loop does with each served query, and when it distils."""

    online_eval_interval: int = field(
        default=10, metadata={"help": "Online mode: log the online metrics every this many served queries."}
    )
    online_update_interval: int = field(
        default=1,
        metadata={
            "help": "Online mode: distil the draft every this many served queries; 0 = never (static: serve the "
            "stream with the draft as it is, Standard SD)."
        },
    )
    online_steps_per_update: int = field(
        default=1,
        metadata={
            "help": "Online mode: optimizer steps each update takes on its buffer (1: the paper's single step; "
            "several smaller steps learn a shifted stream faster)."
        },
    )
    online_replay_queries: int = field(
        default=0,
        metadata={
            "help": "Online mode: keep this many recently served queries in the buffer after an update, so the "
            "next update revisits them beside the new ones (0: the paper's buffer, emptied at each update)."
        },
    )
    online_loss_positions: str = field(
        default="wrong",
        metadata={
            "help": f"{list(LOSS_POSITIONS)}: distil only where the draft was wrong (the paper), or on every "
            "served token."
        },
    )
    online_alpha_window: int = field(
        default=50,
        metadata={"help": "Online mode: alpha is also reported as a moving average over this many queries."},
    )
    draft_serving_dtype: str | None = field(
        default=None,
        metadata={
            "help": "Online mode: serve with a copy of the draft in this dtype (e.g. bfloat16 on a CPU with "
            "AVX512-BF16), refreshed after each update, while the optimizer keeps the draft's own weights; "
            "default: serve the draft itself."
        },
    )
    drafter: str = field(
        default="model",
        metadata={
            "help": f"{list(DRAFTERS)}: what drafts and learns online: the draft model (the paper's), or an EAGLE-3 "
            "head over the target's hidden states (osd.spec.eagle3; --head_path), distilled from the states and "
            "logits kept at verification."
        },
    )
    head_path: str | None = field(
        default=None,
        metadata={
            "help": "--drafter head: the head to start from (a speculators-format folder, osd.spec.eagle3.save_head); "
            "default: a fresh, randomly initialised head over the target's whole vocabulary (Aurora's day 0)."
        },
    )
    online_rejected_weight: float = field(
        default=0.0,
        metadata={
            "help": "--drafter head: also lower the head's probability of each proposal the target rejected, "
            "-log(1 - q) with this weight (Aurora's negative feedback, osd.distill.losses.rejected_proposal_loss); "
            "0: plain distillation on the target's tokens."
        },
    )
    online_background_update: bool = field(
        default=False,
        metadata={
            "help": "Online mode: run each update in a background thread while the next queries are served (by a "
            "serving copy of the draft), then swap the updated draft in; the updated draft serves one turn later "
            "than without it. Needs a spare core."
        },
    )
    online_update_process: bool = field(
        default=False,
        metadata={
            "help": "Online mode, with --online_background_update: run the update's steps in a forked process "
            "(the draft's weights in shared memory), not in the worker thread, so that serving never waits for "
            "the update's Python (the GIL). Linux, CPU drafts, no checkpoints (the optimizer's state stays there)."
        },
    )

    def __post_init__(self) -> None:
        refuse_non_finite(self)  # every float flag, also those of the subclasses (osd.train's, osd.serving's)
        check_online_arguments(self)
        parent = getattr(super(), "__post_init__", None)  # TrainingArguments', in DistillTrainingArguments
        if parent is not None:
            parent()


def check_online_arguments(a: OnlineArguments) -> None:
    """One-line errors naming the flag."""
    for name, choices in CHOICES.items():
        value = getattr(a, name)
        if value is not None and value not in choices:
            raise ValueError(f"--{name} must be one of {list(choices)}, got {value!r}")
    if a.drafter != "head" and (a.head_path is not None or a.online_rejected_weight):
        raise ValueError("--head_path and --online_rejected_weight are for --drafter head")
    if a.online_update_process and not a.online_background_update:
        raise ValueError("--online_update_process runs background updates: add --online_background_update")
    if a.online_rejected_weight < 0:
        raise ValueError(f"--online_rejected_weight must be >= 0, got {a.online_rejected_weight}")
    for name, minimum in (("online_update_interval", 0), ("online_replay_queries", 0), ("online_eval_interval", 1),
                          ("online_steps_per_update", 1), ("online_alpha_window", 1)):  # fmt: skip
        if getattr(a, name) < minimum:
            raise ValueError(f"--{name} must be >= {minimum}, got {getattr(a, name)}")


def online_fields() -> list[str]:
    return [f.name for f in fields(OnlineArguments)]


def add_online_flags(parser: argparse.ArgumentParser, preset: OnlineArguments | None = None) -> None:
    """The online flags on an argparse parser (with their aliases), defaulting to `preset`'s values."""
    preset = preset or OnlineArguments()
    group = parser.add_argument_group("online loop (the same flags as osd.train --mode online)")
    hints = get_type_hints(OnlineArguments)  # not f.type: HfArgumentParser replaces those strings with types
    for f in fields(OnlineArguments):
        names = [f"--{f.name}"] + ([f"--{ALIASES[f.name]}"] if f.name in ALIASES else [])
        default = getattr(preset, f.name)
        help_text = f"{f.metadata['help']} (default: {default})"
        if hints[f.name] is bool:
            group.add_argument(
                *names, dest=f.name, action=argparse.BooleanOptionalAction, default=default, help=help_text
            )
        elif f.name in CHOICES:
            group.add_argument(*names, dest=f.name, choices=CHOICES[f.name], default=default, help=help_text)
        else:
            kind = hints[f.name] if hints[f.name] in (int, float) else str
            group.add_argument(*names, dest=f.name, type=kind, default=default, help=help_text)


def online_arguments(namespace: argparse.Namespace, **overrides) -> OnlineArguments:
    """The OnlineArguments an argparse namespace holds (flags from `add_online_flags`), checked."""
    values = {name: getattr(namespace, name) for name in online_fields()}
    return replace(OnlineArguments(), **(values | overrides))
