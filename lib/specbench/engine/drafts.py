"""Layer-truncated drafts of the embedded model: its first k decoder layers, final norm, tied
embedding and tokenizer — the self-speculative early-exit draft of LayerSkip and Draft & Verify.

Only one model ships with the book and no other checkpoint can be downloaded, so a draft that
shares the target's tokenizer is cut from the target itself. It is a real checkpoint: vLLM's
``draft_model`` proposer and transformers' ``assistant_model`` load it like any other, its cost
ratio c is set by k (the tied 28 M-parameter output head is paid whatever k is), and its
acceptance is whatever the engine's counters say.

Drafts live beside the embedded model in the user cache, never in the repository, keyed by the
target checkpoint's weights hash and k (``smollm2-135m-instruct-<hash>-draft-k<k>``). A folder
whose provenance names another source or depth is refused, not reused.
"""
from __future__ import annotations

import functools
import hashlib
import json
import shutil
import tempfile
from pathlib import Path

__all__ = ["DraftError", "target_layers", "draft_dir", "build_draft", "built_draft", "check_draft",
           "is_draft", "draft_record", "PROVENANCE"]

PROVENANCE = "specbench-provenance.json"
WEIGHTS = "model.safetensors"
# Files copied from the target unchanged: the draft speaks the target's tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                   "generation_config.json", "special_tokens_map.json")


class DraftError(ValueError):
    """A draft depth out of range, or a draft folder that does not match its key."""


def _config(target: Path) -> dict:
    return json.loads((target / "config.json").read_text())


def target_layers(target: Path) -> int:
    return int(_config(target)["num_hidden_layers"])


def _weights_sha256(target: Path) -> str:
    digest = hashlib.sha256()
    with open(target / WEIGHTS, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_depth(target: Path, depth: int) -> None:
    layers = target_layers(target)
    if not 1 <= depth < layers:
        raise DraftError(f"draft depth {depth} out of range: {target} has {layers} decoder "
                         f"layers, a draft keeps 1 to {layers - 1} of them")


def draft_dir(target: Path, depth: int, source_sha256: str | None = None) -> Path:
    """Where the depth-``depth`` draft of ``target`` lives (it may not exist yet)."""
    _check_depth(target, depth)
    sha = source_sha256 or _weights_sha256(target)
    return target.parent / f"{target.name}-draft-k{depth}-{sha[:12]}"


def check_draft(folder: Path, depth: int, source_sha256: str) -> Path:
    """``folder`` if it holds the depth-``depth`` draft of the source with that hash; else a
    one-line :class:`DraftError` naming the folder and the field that does not match."""
    record = folder / PROVENANCE
    if not record.exists():
        raise DraftError(f"{folder}: no draft checkpoint here (missing {PROVENANCE}); build it "
                         "with `specbench draft --depth K`")
    prov = json.loads(record.read_text())
    for field, want in (("depth", depth), ("source_sha256", source_sha256)):
        if prov.get(field) != want:
            raise DraftError(f"{record}: {field} is {prov.get(field)!r}, the key says {want!r}")
    config = _config(folder)
    if config.get("num_hidden_layers") != depth:
        raise DraftError(f"{folder / 'config.json'}: num_hidden_layers is "
                         f"{config.get('num_hidden_layers')!r}, the key says {depth}")
    return folder


def _truncated_tensors(target: Path, depth: int) -> dict:
    """The target's tensors without decoder layers ``depth`` and up."""
    from safetensors.torch import load_file

    kept = {}
    for name, tensor in load_file(target / WEIGHTS).items():
        parts = name.split(".")
        if parts[:2] == ["model", "layers"] and int(parts[2]) >= depth:
            continue
        kept[name] = tensor
    return kept


def build_draft(target: Path, depth: int) -> Path:
    """Write the depth-``depth`` draft of ``target`` once; return its folder."""
    target = Path(target)
    _check_depth(target, depth)   # before importing torch: a bad depth answers at once
    sha = _weights_sha256(target)
    folder = draft_dir(target, depth, sha)
    if folder.exists():
        return check_draft(folder, depth, sha)
    from safetensors.torch import save_file
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".staging-draft-"))
    try:
        save_file(_truncated_tensors(target, depth), staging / WEIGHTS,
                  metadata={"format": "pt"})
        config = {**_config(target), "num_hidden_layers": depth}
        (staging / "config.json").write_text(json.dumps(config, indent=2))
        for name in TOKENIZER_FILES:
            if (target / name).exists():
                shutil.copy2(target / name, staging / name)
        (staging / PROVENANCE).write_text(json.dumps({
            "kind": "layer-truncated draft (first k decoder layers, final norm, tied head)",
            "depth": depth, "target_layers": target_layers(target),
            "source": str(target), "source_sha256": sha}, indent=2))
        staging.rename(folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return folder


@functools.cache
def built_draft(model: str, depth: int) -> str:
    """:func:`build_draft`'s folder for a model path, once per process: its key hashes the
    model's weights, and a sweep or a serving run asks for it per engine."""
    return str(build_draft(Path(model), depth))


def is_draft(folder) -> bool:
    """Whether ``folder`` is a draft this module built: its provenance record names a depth
    (the embedded model's record, written by specbench.engine.assets, has the same file name
    and no depth)."""
    record = Path(folder) / PROVENANCE if folder is not None else None
    return bool(record and record.is_file() and "depth" in json.loads(record.read_text()))


def draft_record(folder) -> dict:
    """What a run's manifest states about a draft: its provenance (depth, source and its hash)
    and the hash of its own weights."""
    folder = Path(folder)
    if not is_draft(folder):
        raise DraftError(f"{folder}: no draft checkpoint here (missing {PROVENANCE}); build it "
                         "with `specbench draft --depth K`")
    return {**json.loads((folder / PROVENANCE).read_text()), "path": str(folder),
            "weights_sha256": _weights_sha256(folder)}
