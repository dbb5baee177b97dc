"""A draft with a sub-vocabulary head (`config.draft_vocab`, osd.spec.draft_vocab) served by vLLM.

vLLM reads such a draft as an ordinary Llama and scores all V rows of its head: exact, but its
cost is the full head's. `SubVocabLlamaForCausalLM` is vLLM's Llama whose `compute_logits` scores
only the V' rows of `config.draft_vocab` and puts -inf elsewhere, as osd's `SubVocabHead` does:
q = 0 outside V', so vLLM's rejection sampler keeps the target's distribution and greedy outputs.

vLLM picks the model class from the folder's `config.json`, so the engine is given a served copy
of the draft (`served_draft_folder`): the same weights and tokenizer, `architectures` naming this
class (osd.serving.subvocab_model). `register` makes the class known to vLLM; it runs in the process that builds the engine
(osd.serving.engine) and in vLLM's worker process (importing osd.serving.worker). The head's rows
are gathered once and again after each swap (`refresh_head`, called by the worker's reload).
Tensor parallelism shards the head's rows across ranks: the served copy keeps the full head then.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

ARCHITECTURE = "OSDSubVocabLlamaForCausalLM"
DRAFT_FILES = (
    "*.safetensors",
    "*.json",
    "*.jinja",
    "*.txt",
    "tokenizer.model",
)  # weights, tokenizer, configs


def register() -> None:
    """Make `ARCHITECTURE` known to vLLM's model registry in this process (idempotent)."""
    from vllm import ModelRegistry

    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, "osd.serving.subvocab_model:SubVocabLlamaForCausalLM")


def served_draft_folder(draft: str, out_dir: str | Path, tensor_parallel_size: int = 1) -> str:
    """The folder vLLM should load for `draft`: the draft itself when its head is full (or under tensor
    parallelism), else a copy in `out_dir`/served_draft whose config names `ARCHITECTURE`."""
    config_path = Path(draft) / "config.json"
    if not config_path.is_file():
        return draft  # a hub id: vLLM resolves it; osd drafts with a head are local folders
    config = json.loads(config_path.read_text())
    if not config.get("draft_vocab") or tensor_parallel_size > 1:
        return draft
    if config.get("architectures") != ["LlamaForCausalLM"]:
        raise ValueError(f"{config_path}: a sub-vocabulary head is served for Llama drafts only, "
                         f"got architectures {config.get('architectures')}")  # fmt: skip
    served = Path(out_dir) / "served_draft"
    served.mkdir(parents=True, exist_ok=True)
    for pattern in DRAFT_FILES:
        for path in Path(draft).glob(pattern):
            if path.is_file() and path.name != "config.json":
                shutil.copyfile(path, served / path.name)
    (served / "config.json").write_text(json.dumps(config | {"architectures": [ARCHITECTURE]}, indent=2))
    return str(served)
