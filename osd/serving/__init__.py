"""Online speculative decoding on a real serving engine (vLLM): the target served with the OSD drafter
(a draft model, or an EAGLE-3 head) as its speculator, distilled beside it and swapped in while it serves.

    osd.serving.online       the loop: serve -> buffer -> update -> swap
    osd.serving.engine       vLLM: build the engine, keep requests in flight, swap the draft
    osd.serving.worker       inside vLLM's worker: the in-place reload of the drafter's weights
    osd.serving.speculator   vLLM's method for a drafter folder: eagle3 for a head, draft_model otherwise
    osd.serving.distiller    the trainer side: target logits (and a head's states), the update, the export
    osd.serving.acceptance   vLLM's per-request counters as osd's alpha and loss positions

Needs vLLM (`bash bash_scripts/setup_vllm.sh` makes its environment); `python -m osd.serving --help`.
"""
