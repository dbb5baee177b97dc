"""Runs inside vLLM's worker process: reload the speculator's weights in place (a draft model's, or an
EAGLE-3 head's).

vLLM mixes `DraftReloadExtension` into its worker class when the engine is built with
`worker_extension_cls="osd.serving.worker.DraftReloadExtension"`; the engine then calls
`reload_draft` by name through `collective_rpc` (a registered method: no pickled code crosses).
The reload is vLLM's own layer-wise in-place reload (`reload_weights`): a plain
`model.load_weights` would fail on the CPU backend, whose linear weights are repacked after loading.
Importing this module registers osd's sub-vocabulary draft class (osd.serving.subvocab) in the worker.
A draft with tied embeddings logs "ParallelLMHead: Failed to load weights": its head is the
embedding's parameter, reloaded with it (checked on the demo draft: the head stays the same tensor
as the embedding and takes its new values). An EAGLE-3 head logs "VocabParallelEmbedding: Failed to load
weights" (and "RotaryEmbedding: ...", its cos/sin cache): its embedding is the target's module (vLLM shares it),
not in the head's checkpoint, and is put back as it was; `Eagle3LlamaForCausalLM.load_weights` maps the head's names (fc, layers.0.*, norm, lm_head,
d2t; t2d is skipped).
"""

from __future__ import annotations

import copy
import time

import torch
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

    @torch.no_grad()
    def head_probe(self, rows: int = 2) -> dict[str, list]:
        """The served EAGLE-3 head's modules on `probe_input(rows, K H)` x: h = fc(x) [rows, H], the layer's qkv
        projection of [h, h] [rows, (heads + 2 kv heads) D], its o projection of the q part [rows, H], its MLP of h
        [rows, H], the logits of h [rows, V] (-inf outside V'), and the target layers whose states it reads: what a
        test compares with the exported head to see a swap land in the linear layers, which the CPU backend
        repacks (their `weight` reads as zeros)."""
        model = self.model_runner.drafter.model
        attention, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
        x = probe_input(rows, model.model.fc_input_size).to(self.vllm_config.model_config.dtype)
        h = model.combine_hidden_states(x)
        qkv, _ = attention.qkv_proj(torch.cat([h, h], -1))
        outputs = {"fc": h, "qkv": qkv, "o": attention.o_proj(qkv[:, : attention.q_size])[0], "mlp": mlp(h),
                   "logits": model.compute_logits(h)}  # fmt: skip
        probe = {name: t.float().tolist() for name, t in outputs.items()}
        probe["target_layers"] = list(self.model_runner.model.model.aux_hidden_state_layers)
        return probe


def probe_input(rows: int, width: int) -> torch.Tensor:
    """A fixed input of `head_probe`: [rows, width] standard normal draws of seed 0."""
    return torch.randn(rows, width, generator=torch.Generator().manual_seed(0))
