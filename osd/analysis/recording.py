"""A target's recorded greedy outputs: written once by `osd.analysis.record`, replayed by
`osd.analysis.simulate` for any draft that shares the target's tokenizer.

On disk, a stem `rec` is two files:
- `rec.jsonl`: a header line (`{"format": FORMAT, "model": ..., "tokenizer": {...},
  "prompt_template": ..., "max_new_tokens": ..., "top_k": ..., ...}`) then one line per prompt
  (`{"id", "prompt_ids", "output_ids", "ended": "eos" | "budget"}`);
- `rec.safetensors` (only with top-k or features): per prompt i, with top-k `topk_ids.{i}` [N_i, k] int32,
  `topk_logits.{i}` [N_i, k] float32 and `logsumexp.{i}` [N_i] float32 (the log-normaliser of the
  full softmax at the header's `temperature`), for the N_i output positions; with the header's
  `feature_layers` (`record --features`), `features.{i}` [T_i + N_i - 1, K H] in the target's dtype: its input
  states at those K layers at every position but the last, what an EAGLE-3 head reads (`osd.spec.eagle3`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from transformers import PreTrainedTokenizerBase

from osd.conversations import load_conversations
from osd.datafiles import json_lines, read_text, refuse_foreign_file, replacing, write_text
from osd.model_checks import SPECIAL_IDS
from osd.paths import REPO_ROOT

FORMAT = "osd-recording/1"


HEADER_LIMIT = 1 << 20  # characters read of a file's first line to tell a recording header
TOPK = ("topk_ids", "topk_logits", "logsumexp")  # per prompt record i in the tensor file: `{name}.{i}`
FEATURES = "features"


class RecordingError(ValueError):
    """A recording file is malformed or does not fit the draft or flags it is used with."""


def tokenizer_identity(tokenizer: PreTrainedTokenizerBase) -> dict:
    """Name, size, vocabulary hash and special ids: what a draft must share with the recording."""
    vocab = sorted(tokenizer.get_vocab().items())
    return {
        "name": tokenizer.name_or_path,
        "vocab_size": len(vocab),
        "vocab_sha256": hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest(),
        **{name: getattr(tokenizer, name) for name in SPECIAL_IDS},
    }


def identity_difference(recorded: dict, draft: dict) -> str | None:
    """How a draft's tokenizer identity differs from the recorded one (None when it does not);
    the names may differ (a copy of the tokenizer elsewhere is the same tokenizer)."""
    diffs = [
        f"{k} {recorded.get(k)!r} vs {draft.get(k)!r}"
        for k in recorded
        if k != "name" and recorded.get(k) != draft.get(k)
    ]
    return "; ".join(diffs) or None


@dataclass
class PromptRecord:
    id: str
    prompt_ids: list[int]
    output_ids: list[int]  # the target's greedy tokens, EOS included when it ended on one
    ended: str  # "eos" or "budget" (max_new_tokens or the context ran out)
    topk_ids: torch.Tensor | None = field(default=None, repr=False)  # [N, k]
    topk_logits: torch.Tensor | None = field(default=None, repr=False)  # [N, k]
    logsumexp: torch.Tensor | None = field(default=None, repr=False)  # [N]
    features: torch.Tensor | None = field(default=None, repr=False)  # [T + N - 1, K H]


@dataclass
class Recording:
    header: dict
    prompts: list[PromptRecord]

    def save(self, stem: str | Path) -> tuple[Path, ...]:
        """Write `{stem}.jsonl` (and `{stem}.safetensors` with top-k); returns the paths written."""
        jsonl, tensors = paths(stem)
        lines = [self.header] + [
            {"id": p.id, "prompt_ids": p.prompt_ids, "output_ids": p.output_ids, "ended": p.ended}
            for p in self.prompts
        ]
        write_text(jsonl, "".join(json.dumps(line) + "\n" for line in lines))
        names = tensor_names(self.header)
        if not names:
            return (jsonl,)
        arrays = {}
        for i, p in enumerate(self.prompts):
            if self.header.get("top_k"):
                arrays |= {f"topk_ids.{i}": p.topk_ids.int(), f"topk_logits.{i}": p.topk_logits.float()}
                arrays[f"logsumexp.{i}"] = p.logsumexp.float()
            if FEATURES in names:
                arrays[f"{FEATURES}.{i}"] = p.features
        with replacing(tensors) as tmp:
            save_file({k: v.contiguous() for k, v in arrays.items()}, str(tmp))
        return jsonl, tensors


def tensor_names(header: dict) -> tuple[str, ...]:
    """The per-prompt tensors a recording with this header keeps (top-k's, the target's states)."""
    return (TOPK if header.get("top_k") else ()) + ((FEATURES,) if header.get("feature_layers") else ())


def paths(stem: str | Path) -> tuple[Path, Path]:
    """(`{stem}.jsonl`, `{stem}.safetensors`); a stem given with either suffix is accepted."""
    stem = Path(stem)
    if stem.suffix in (".jsonl", ".safetensors"):
        stem = stem.with_suffix("")
    return stem.with_name(stem.name + ".jsonl"), stem.with_name(stem.name + ".safetensors")


RECORDER = "osd.analysis.record"  # the tool that writes recordings


def is_recording(path: Path) -> bool:
    """Whether `path`, either file of a recording, belongs to one: its .jsonl starts with a recording header."""
    jsonl, _ = paths(path)
    try:
        with jsonl.open(encoding="utf-8") as f:
            first = json.loads(f.readline(HEADER_LIMIT))
    except (OSError, ValueError):
        return False
    return isinstance(first, dict) and first.get("format") == FORMAT


def refuse_foreign_output(stem: str | Path, flag: str) -> None:
    """Raise when a file that a recording at `stem` would write exists and is not a recording's: a
    recording replaces an earlier recording only (`refuse_foreign_file`)."""
    for path in paths(stem):
        refuse_foreign_file(path, flag, RECORDER, own=is_recording)


def load_recording(stem: str | Path) -> Recording:
    """Read a recording written by `Recording.save` (the tensors too when its header has top_k)."""
    jsonl, tensors = paths(stem)
    if not jsonl.is_file():
        raise FileNotFoundError(f"{jsonl}: no such recording; write one with `python -m osd.analysis.record`")
    lines = json_lines(read_text(jsonl), jsonl, "the recording is torn: record it again", RecordingError)
    if not lines or not isinstance(lines[0], dict) or lines[0].get("format") != FORMAT:
        raise RecordingError(
            f"{jsonl}: the first line is not a {FORMAT} header; re-record it with osd.analysis.record"
        )
    header, rows = lines[0], lines[1:]
    if not rows:
        raise RecordingError(
            f"{jsonl}: a header and no prompt records; re-record it with prompts (--limit >= 1)"
        )
    arrays, names = {}, tensor_names(header)
    if names:
        if not tensors.is_file():
            raise RecordingError(f"{jsonl}: its header asks for {', '.join(names)} but {tensors} is missing")
        try:
            arrays = load_file(str(tensors))
        except SafetensorError as e:
            raise RecordingError(
                f"{tensors}: not a readable tensor file ({e}); the recording is torn: record it again"
            ) from None
        if set(arrays) != {f"{k}.{i}" for i in range(len(rows)) for k in names}:
            held = len({name.partition(".")[2] for name in arrays})
            raise RecordingError(
                f"{tensors} holds the tensors of {held} prompt records, {jsonl} {len(rows)}: the two files "
                "are not one recording (one is cut short, or from another run); record it again"
            )
        refuse_non_finite_tensors(arrays, tensors, [row.get("id") for row in rows])
    prompts = []
    for i, row in enumerate(rows):
        try:
            prompts.append(PromptRecord(**row, **{k: arrays.get(f"{k}.{i}") for k in names}))
        except TypeError as e:
            raise RecordingError(f"{jsonl}, line {i + 2}: not a prompt record ({e})") from e
    return Recording(header, prompts)


def refuse_non_finite_tensors(arrays: dict[str, torch.Tensor], tensors: Path, ids: list) -> None:
    """Raise naming the tensor, prompt and position of the first NaN or infinite recorded value."""
    for name in sorted(arrays):
        bad = (~torch.isfinite(arrays[name])).nonzero()
        if len(bad):
            position = tuple(bad[0].tolist())
            prompt = ids[int(name.partition(".")[2])]
            raise RecordingError(
                f"{tensors}: {name} (prompt {prompt}) holds {arrays[name][position].item()} at position "
                f"{list(position)}; a recording holds finite values: record it again"
            )


def recorded_model(recording: Recording) -> str:
    """The recorded target: its folder (the header's path, relative to the repository root unless absolute)."""
    return str(REPO_ROOT / recording.header["model"])


def check_token_ids(recording: Recording, rows: int, model: str) -> None:
    """Raise unless every recorded token id (prompts and outputs) is below `rows`, the number of
    token ids `model` embeds."""
    top, pid = max((max(p.prompt_ids + p.output_ids), p.id) for p in recording.prompts)
    if top >= rows:
        raise RecordingError(
            f"{model} embeds {rows} token ids, but prompt {pid} of the recording holds token id {top}: "
            "use a draft with the target's whole vocabulary"
        )


def prompt_id(record: dict, index: int) -> str:
    """A conversation record's id in a recording: its `id` field, else its index in the file."""
    return str(record.get("id", index))


def stream_groups(recording: Recording, source: str, stream: str | Path, flag: str) -> list[str]:
    """The `dataset` of each recorded prompt, read from the conversation file `stream` (`flag`); raise
    unless that file's records are the prompts of the recording at `source`, in order."""
    records = load_conversations(stream)
    for i, prompt in enumerate(recording.prompts):
        found = prompt_id(records[i], i) if i < len(records) else None
        if found != prompt.id:
            held = "ends before it" if found is None else f"has {found!r}"
            raise RecordingError(
                f"{flag} {stream} is not the stream recorded in {source}: the recording's prompt {i} is "
                f"{prompt.id!r}, the file {held} (recorded from {recording.header.get('conversations')})"
            )
    return [r.get("dataset", "all") for r in records[: len(recording.prompts)]]


def check_same_target(recording: Recording, source: str, other: Recording, other_source: str) -> None:
    """Raise unless two recordings hold one target's outputs: model, tokenizer, template, temperature."""
    diffs = [
        f"{k} {recording.header.get(k)!r} vs {other.header.get(k)!r}"
        for k in ("model", "prompt_template", "temperature")
        if recording.header.get(k) != other.header.get(k)
    ]
    tokenizer = identity_difference(recording.header["tokenizer"], other.header["tokenizer"])
    diffs += [f"tokenizer: {tokenizer}"] if tokenizer else []
    if diffs:
        raise RecordingError(
            f"recordings {source} and {other_source} were made differently: {'; '.join(diffs)}"
        )
