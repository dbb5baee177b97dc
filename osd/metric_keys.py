"""The names of the logged metrics: one scheme for online serving, evaluation, metrics.jsonl, wandb and the
dashboard (osd.dashboard).

An online log entry (`OnlineState.metrics`, one every --online_eval_interval queries) holds

    alpha                   token-weighted alpha of the queries since the previous entry
    alpha_window            ... of the last --online_alpha_window queries
    alpha_cumulative        ... of every query served so far
    alpha/{field}/{value}   ... of the entry's queries whose `field` (dataset, topic, language) is `value`
    accepted_length         accepted draft tokens per verification step
    queries_served          queries served so far: the x-axis of every online metric
    online_loss             mean distillation loss of the updates since the previous entry
    update_time_share       updates' time on the serving path / serving time (also
                            background_update_share, serve_time_s, online_updates, buffer_peak_mb, proposed)

and, served on vLLM (osd.serving.online), also
    vllm_acceptance_rate    vLLM's acceptance: accepted / proposed draft tokens, every proposal counted
                            (alpha counts those up to a step's first rejection: osd.serving.acceptance)
    draft_swaps             draft swaps into the running engine so far
    swap_time_s             the last swap's time: export + reload into the engine

and an evaluation (`DistillTrainer.evaluate`) the same alpha names behind Trainer's metric prefix:
`eval_alpha`, `eval_alpha/{field}/{value}`, `eval_accepted_length`. Both compute per-group alpha with
`group_alphas`, so one group has one name wherever it is measured.

metrics.jsonl keeps these names; wandb gets them as HF's WandbCallback rewrites them (`wandb_key`):
`train/alpha/dataset/sql` for the online entry, `eval/alpha/dataset/sql` for evaluation.

Logs written before this scheme named the counter `queries` and per-group alpha `alpha_{value}` (dataset,
topic and language values mixed); `upgrade_entry` renames the counter, the old per-group keys stay as they
were (their field is unknown).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

from transformers.integrations.integration_utils import rewrite_logs

from osd.alpha import pooled_alpha
from osd.conversations import GROUP_FIELDS

ALPHA = "alpha"
ALPHA_WINDOW = "alpha_window"
ALPHA_CUMULATIVE = "alpha_cumulative"
ACCEPTED_LENGTH = "accepted_length"
QUERIES_SERVED = "queries_served"
ONLINE_LOSS = "online_loss"
UPDATE_TIME_SHARE = "update_time_share"
BACKGROUND_UPDATE_SHARE = "background_update_share"
VLLM_ACCEPTANCE_RATE = "vllm_acceptance_rate"
SWAPS = "draft_swaps"
SWAP_TIME = "swap_time_s"
EVAL_PREFIX = "eval_"  # Trainer.evaluate's metric_key_prefix, with its separator
LEGACY_QUERIES = "queries"  # the counter's name before `queries_served`
GROUP_KEY = re.compile(rf"^{ALPHA}/({'|'.join(GROUP_FIELDS)})/(.+)$")


def group_key(field: str, value: str) -> str:
    """`alpha/{field}/{value}`; a '/' or '*' inside the value becomes '_' (they would split the key's
    hierarchy or make a wandb glob)."""
    if field not in GROUP_FIELDS:
        raise ValueError(f"group field must be one of {list(GROUP_FIELDS)}, got {field!r}")
    return f"{ALPHA}/{field}/{re.sub(r'[/*]', '_', value)}"


def group_alphas(queries: Iterable[tuple[dict[str, str], float, int]]) -> dict[str, float | None]:
    """Token-weighted alpha per group: {group_key(field, value): `pooled_alpha`(sum alpha_sum, sum num_proposed)}
    (None for a group with nothing proposed), in GROUP_FIELDS order, then by value. Each query is (its group
    fields, alpha_sum, num_proposed)."""
    sums: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    for groups, alpha_sum, proposed in queries:
        for field in GROUP_FIELDS:
            if isinstance(groups.get(field), str):
                total = sums[field, groups[field]]
                total[0] += alpha_sum
                total[1] += proposed
    order = sorted(sums, key=lambda k: (GROUP_FIELDS.index(k[0]), k[1]))
    return {group_key(*k): pooled_alpha(*sums[k]) for k in order}


def wandb_key(key: str) -> str:
    """The name a metrics.jsonl key has on wandb (HF's WandbCallback: `train/...`, or `eval/...` for eval_)."""
    return next(iter(rewrite_logs({key: None})))


def upgrade_entry(entry: dict) -> dict:
    """A metrics.jsonl entry with the counter under its current name (logs from before `queries_served`)."""
    if LEGACY_QUERIES in entry and QUERIES_SERVED not in entry and ALPHA_WINDOW in entry:
        entry = {(QUERIES_SERVED if k == LEGACY_QUERIES else k): v for k, v in entry.items()}
    return entry
