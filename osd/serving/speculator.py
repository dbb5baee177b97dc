"""Which of vLLM's speculative methods serves a drafter folder.

An EAGLE-3 head (a speculators-format folder: `osd.spec.eagle3.save_head`) is served with method "eagle3": vLLM
runs it over the target's states at the layers its config names (`eagle_aux_hidden_state_layer_ids`) and shares
the target's token embedding. Any other model folder (or hub id) is a separate draft model, method "draft_model".
"""

from __future__ import annotations

import json
from pathlib import Path

HEAD_TYPE = "eagle3"  # the speculators_model_type of a head osd writes and serves


def speculative_method(draft: str) -> str:
    """vLLM's `speculative_config["method"]` for the drafter at `draft`."""
    config_path = Path(draft) / "config.json"
    if not config_path.is_file():
        return "draft_model"  # a hub id: vLLM resolves it; osd's heads are local folders
    kind = json.loads(config_path.read_text(encoding="utf-8")).get("speculators_model_type")
    if kind is None:
        return "draft_model"
    if kind != HEAD_TYPE:
        raise ValueError(
            f"{config_path}: speculators_model_type {kind!r}; osd serves {HEAD_TYPE!r} heads only"
        )
    return "eagle3"
