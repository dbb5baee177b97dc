"""osd.serving.subvocab without vLLM: the folder vLLM is given for a draft."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from osd.paths import TINY_DRAFT_PATH
from osd.serving.subvocab import ARCHITECTURE, served_draft_folder
from osd.spec.draft_vocab import set_draft_vocab


@pytest.fixture
def subvocab_draft(tmp_path) -> Path:
    draft = AutoModelForCausalLM.from_pretrained(TINY_DRAFT_PATH)
    set_draft_vocab(draft, range(0, draft.config.vocab_size, 2))
    draft.save_pretrained(tmp_path / "draft")
    AutoTokenizer.from_pretrained(TINY_DRAFT_PATH).save_pretrained(tmp_path / "draft")
    return tmp_path / "draft"


def test_a_full_head_is_served_as_it_is(tmp_path) -> None:
    assert served_draft_folder(str(TINY_DRAFT_PATH), tmp_path) == str(TINY_DRAFT_PATH)
    assert not (tmp_path / "served_draft").exists()


def test_a_subvocab_head_is_served_as_a_copy_naming_osds_class(subvocab_draft, tmp_path) -> None:
    served = Path(served_draft_folder(str(subvocab_draft), tmp_path / "out"))
    config, original = (json.loads((d / "config.json").read_text()) for d in (served, subvocab_draft))
    assert config["architectures"] == [ARCHITECTURE] and original["architectures"] == ["LlamaForCausalLM"]
    assert config | {"architectures": original["architectures"]} == original  # nothing else changed
    for name in ("model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (served / name).read_bytes() == (subvocab_draft / name).read_bytes(), name
    # twice into the same folder: the same copy
    assert served_draft_folder(str(subvocab_draft), tmp_path / "out") == str(served)


def test_tensor_parallel_serves_the_full_head(subvocab_draft, tmp_path) -> None:
    assert served_draft_folder(str(subvocab_draft), tmp_path, tensor_parallel_size=2) == str(subvocab_draft)


def test_a_subvocab_head_on_another_architecture_is_refused(subvocab_draft, tmp_path) -> None:
    config = json.loads((subvocab_draft / "config.json").read_text())
    (subvocab_draft / "config.json").write_text(
        json.dumps(config | {"architectures": ["MistralForCausalLM"]})
    )
    with pytest.raises(ValueError, match="config.json.*Llama drafts only"):
        served_draft_folder(str(subvocab_draft), tmp_path)
