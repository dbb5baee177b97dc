"""The flags of `osd.train` (`osd-train`) and `osd.distill.routing`: grouped flags, listed choices,
usage errors, hub check.

`python -m osd.train --help` lists the project's flags first, in three groups (models, data,
distillation), then every `transformers.TrainingArguments` flag. A flag with a fixed set of values
shows and checks it (`{offline,online}`); a missing --teacher_model_path/--data_path or a bad value
is an argparse usage error (message and exit status 2), never a traceback.

Hub names are loaded from the local cache without waiting when the hub cannot be reached:
`go_offline_if_unreachable` tries the hub once (HEAD, `HUB_CHECK_TIMEOUT_S`) and, when that fails,
switches huggingface_hub to offline mode (`HF_HUB_OFFLINE=1`); otherwise it retries each request 5
times (23 s of back-off) before it falls back to the cache. An explicit `HF_HUB_OFFLINE` (0 or 1) is left alone.
"""

from __future__ import annotations

import logging
import os
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import fields
from pathlib import Path

import datasets.config
import huggingface_hub.constants
from transformers import HfArgumentParser, TrainingArguments

from osd.conversations import GROUP_FIELDS
from osd.distill.config import (
    DTYPES,
    MODES,
    SAMPLE_SOURCES,
    DataArguments,
    DistillTrainingArguments,
    ModelArguments,
)
from osd.distill.losses import DIVERGENCES
from osd.distill.reference_flags import parse_cli
from osd.online.config import LOSS_POSITIONS, SERVING_DTYPES

logger = logging.getLogger(__name__)

HUB_CHECK_TIMEOUT_S = 3.0
REQUIRED = ("teacher_model_path", "data_path")
CHOICES: dict[str, Sequence[str]] = {
    "student_dtype": DTYPES,
    "teacher_dtype": DTYPES,
    "mode": MODES,
    "sample_source": SAMPLE_SOURCES,
    "kl_method": sorted(DIVERGENCES),
    "online_loss_positions": LOSS_POSITIONS,
    "draft_serving_dtype": SERVING_DTYPES,
    "route_by": GROUP_FIELDS,
}
USAGE = (
    "python -m {prog} --teacher_model_path T --student_model_path S --data_path DATA "
    "--output_dir DIR [--mode {{offline,online}}] [flags]"
)
DESCRIPTION = (
    "Distil a draft (student) model from a target (teacher), offline or online. The project's flags "
    "come first; every transformers.TrainingArguments flag follows (the reference's command lines "
    "work too: osd.distill.reference_flags)."
)


def _own_training_fields() -> set[str]:
    """DistillTrainingArguments' own flags (not TrainingArguments')."""
    return {f.name for f in fields(DistillTrainingArguments)} - {f.name for f in fields(TrainingArguments)}


def _changed_defaults() -> list[str]:
    """TrainingArguments flags whose default DistillTrainingArguments changes."""
    hf = {f.name: f.default for f in fields(TrainingArguments)}
    return [f.name for f in fields(DistillTrainingArguments) if f.name in hf and f.default != hf[f.name]]


def build_parser(extra: Sequence[type] = (), prog: str = "osd.train") -> HfArgumentParser:
    """The parser of the three dataclasses (then `extra` ones, a group each), its flags regrouped:
    models, data, distillation, `extra`, then TrainingArguments (help and choices as in `--help`)."""
    parser = HfArgumentParser(
        (ModelArguments, DataArguments, DistillTrainingArguments, *extra),
        prog=prog,
        usage=USAGE.format(prog=prog),
        description=DESCRIPTION,
    )
    groups = [
        (parser.add_argument_group("models"), {f.name for f in fields(ModelArguments)}),
        (parser.add_argument_group("data"), {f.name for f in fields(DataArguments)}),
        (parser.add_argument_group("distillation (osd)"), _own_training_fields()),
        *((parser.add_argument_group(cls.__name__), {f.name for f in fields(cls)}) for cls in extra),
    ]
    hf_group = parser.add_argument_group(
        "transformers.TrainingArguments", f"(defaults changed here: {', '.join(_changed_defaults())})"
    )
    for action in list(parser._optionals._group_actions):
        if action.dest == "help":
            continue
        group = next((g for g, names in groups if action.dest in names), hf_group)
        parser._optionals._group_actions.remove(action)
        group._group_actions.append(action)
        if action.dest in CHOICES and action.option_strings[0] == f"--{action.dest}":
            action.choices = CHOICES[action.dest]
        if action.dest in REQUIRED:
            action.required = True
        if (
            action.dest == "max_propose_num"
        ):  # a Gamma ("auto" or an int): the dataclass parses it (osd.spec.gamma)
            action.type = str
    # the help's sections in this order: -h, the project's groups, TrainingArguments
    parser._action_groups = [parser._optionals, *(g for g, _ in groups), hf_group]
    return parser


def parse_train_args(argv: Sequence[str], extra: Sequence[type] = (), prog: str = "osd.train") -> tuple:
    """(ModelArguments, DataArguments, DistillTrainingArguments, *extra) from `argv`; a bad command
    line exits with a usage error (status 2), and so does a multi-process launch that transformers would
    run as separate runs (torchrun on a CPU without --use_cpu). Then, when a model is a hub name,
    `go_offline_if_unreachable`.
    """
    parser = build_parser(extra, prog)
    try:
        parsed = parse_cli(parser, argv)
    except ValueError as e:  # a flag's value refused by a dataclass or by the reference-flag translation
        parser.error(str(e))
    model_args, data_args, training_args = parsed[:3]
    launched = int(os.environ.get("WORLD_SIZE", "1"))  # set by torchrun and accelerate launch
    if launched > 1 and training_args.world_size == 1:  # each process would train alone, into one folder
        parser.error(
            f"the launcher started {launched} processes, but transformers runs each as a whole run "
            "(no GPU here): add --use_cpu True to train them as one run over gloo"
        )
    go_offline_if_unreachable(
        [
            model_args.student_model_path if training_args.drafter == "model" else training_args.head_path,
            model_args.teacher_model_path,
            data_args.data_path,
            data_args.eval_data_path,
        ]
    )
    return parsed


def hub_reachable(timeout: float = HUB_CHECK_TIMEOUT_S) -> bool:
    """Whether the hub endpoint (HF_ENDPOINT) answers at all within `timeout` seconds."""
    request = urllib.request.Request(huggingface_hub.constants.ENDPOINT, method="HEAD")
    try:
        urllib.request.urlopen(request, timeout=timeout).close()
    except urllib.error.HTTPError:
        return True  # an HTTP status is an answer
    except OSError:  # URLError, timeouts, refused connections, unknown host
        return False
    return True


def go_offline_if_unreachable(model_paths: Iterable[str | None]) -> bool:
    """Switch huggingface_hub and datasets to offline mode when some model or data set is a hub name
    (not a local path), the user set no HF_HUB_OFFLINE and the hub does not answer; True when it did."""
    hub_names = [p for p in model_paths if p is not None and not Path(p).exists()]
    if not hub_names or "HF_HUB_OFFLINE" in os.environ or hub_reachable():
        return False
    os.environ["HF_HUB_OFFLINE"] = "1"  # for subprocesses
    huggingface_hub.constants.HF_HUB_OFFLINE = True  # read at every request by this process
    datasets.config.HF_HUB_OFFLINE = True  # datasets read the variable when imported
    logger.warning(
        "%s unreachable: loading %s from the local cache (HF_HUB_OFFLINE=1); set HF_HUB_OFFLINE=0 to retry the hub",
        huggingface_hub.constants.ENDPOINT,
        ", ".join(hub_names),
    )
    return True
