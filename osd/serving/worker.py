"""Runs inside vLLM's worker process: reload the draft speculator's weights in place.

vLLM mixes `DraftReloadExtension` into its worker class when the engine is built with
`worker_extension_cls="osd.serving.worker.DraftReloadExtension"`; the engine then calls
`reload_draft` by name through `collective_rpc` (a registered method: no pickled code crosses).
The reload is vLLM's own layer-wise in-place reload (`reload_weights`): a plain
`model.load_weights` would fail on the CPU backend, whose linear weights are repacked after loading.
Importing this module registers osd's sub-vocabulary draft class (osd.serving.subvocab) in the worker.
A draft with tied embeddings logs "ParallelLMHead: Failed to load weights": its head is the
embedding's parameter, reloaded with it (checked on the demo draft: the head stays the same tensor
as the embedding and takes its new values).
"""

from __future__ import annotations

import copy
import time

from safetensors.torch import load_file

from osd.serving.subvocab import register

register()  # this module is imported in vLLM's worker process before the draft loads


class DraftReloadExtension:
    """Worker mix-in (`self` is vLLM's worker: `model_runner`, `vllm_config`)."""

    def reload_draft(self, path: str) -> float:
        """Load the draft's weights from the safetensors file `path` (checkpoint names, any float dtype)
        into the running speculator; returns the seconds it took."""
        from vllm.model_executor.model_loader.reload.inplace import reload_weights

        start = time.perf_counter()
        drafter = self.model_runner.drafter
        config = copy.copy(self.vllm_config)  # the draft's model config in place of the target's
        config.model_config = config.speculative_config.draft_model_config
        weights = load_file(path)
        reload_weights(config, drafter.model, iter(weights.items()), None, is_checkpoint_format=True)
        if hasattr(drafter.model, "refresh_head"):  # a sub-vocabulary head (osd.serving.subvocab_model)
            drafter.model.refresh_head()
        return time.perf_counter() - start

    def draft_head_sums(self) -> tuple[float, float, float]:
        """(sum of the speculator's input embedding, of its output head, of the head rows it scores: the
        V' rows of a sub-vocabulary head): what a test compares with the exported weights to see a swap
        land in all three (the linear layers are repacked on the CPU)."""
        model = self.model_runner.drafter.model
        scored = model.head_rows() if hasattr(model, "head_rows") else model.lm_head.weight
        sums = (model.model.embed_tokens.weight, model.lm_head.weight, scored)
        return tuple(float(w.float().sum()) for w in sums)
