"""Model folders, read without loading a model: is it a causal LM, how long is its context,
does its tokenizer have a chat template. What ``rlinf train --dry-run`` checks up front."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlinf_core.errors import ConfigError

__all__ = [
    "check_model_files",
    "check_model_folder",
    "context_length",
    "folder_context_length",
    "has_chat_template",
]


def check_model_folder(path: str | Path, key: str = "model.path") -> Path:
    """``path`` as a model folder of a causal LM, or a :class:`ConfigError` at ``key``: a folder
    that does not exist, has no ``config.json``, or whose architecture is not a causal LM."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise ConfigError(
            f"{folder} is not a folder (a Hugging Face model folder with config.json)", path=key
        )
    cfg_file = folder / "config.json"
    if not cfg_file.is_file():
        raise ConfigError(f"{folder} has no config.json: not a Hugging Face model folder", path=key)
    try:
        cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ConfigError(f"{cfg_file}: unreadable ({err})", path=key) from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{cfg_file}: not a JSON object", path=key)
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_type = cfg.get("model_type")
    archs = [str(a) for a in cfg.get("architectures") or []]
    causal = model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or any(a.endswith("ForCausalLM") for a in archs)
    if not causal and not cfg.get("auto_map", {}).get("AutoModelForCausalLM"):
        raise ConfigError(
            f"{folder} holds a {model_type or '?'} model ({', '.join(archs) or 'no architectures'}), "
            "not a causal language model (AutoModelForCausalLM)",
            path=key,
        )
    return folder


def check_model_files(path: str | Path, key: str = "model.path", trust_remote_code: bool = False) -> None:
    """The weights and the tokenizer of model folder ``path``, checked as a worker loads them
    but without building the model: a weights file exists (``model.safetensors``, its shards, or
    ``pytorch_model.bin``), each safetensors file's header and size agree (a damaged or cut file
    fails), and the tokenizer loads as :meth:`~rlinf_algos.lm.tokens.LMTokenizer.from_folder`
    loads it and round-trips a short text. A :class:`ConfigError` at ``key`` names the folder
    and the file."""
    folder = Path(path).expanduser()
    index = folder / "model.safetensors.index.json"
    files = sorted(folder.glob("*.safetensors"))
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise ConfigError(
                f"{folder}: {index.name} is unreadable ({type(err).__name__}: {err})", path=key
            ) from None
        missing = [s for s in shards if not (folder / str(s)).is_file()]
        if missing:
            raise ConfigError(f"{folder}: {index.name} names {missing[0]}, which is missing", path=key)
    has_bin = any(folder.glob("pytorch_model*.bin"))
    if not files and not has_bin:
        raise ConfigError(
            f"{folder} has no weights file (model.safetensors, its shards, or pytorch_model.bin)", path=key
        )
    from safetensors import safe_open

    for file in files:
        try:
            with safe_open(str(file), framework="np") as fh:
                list(fh.keys())
            end = _safetensors_end(file)
        except Exception as err:
            detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ConfigError(
                f"{folder}: the weights file {file.name} is damaged ({detail})", path=key
            ) from None
        size = file.stat().st_size
        if end != size:
            raise ConfigError(
                f"{folder}: the weights file {file.name} is damaged ({size} bytes, its header describes {end})",
                path=key,
            )
    from rlinf_algos.lm.tokens import LMTokenizer

    try:
        tok = LMTokenizer.from_folder(folder, trust_remote_code)
        tok.decode(tok.encode("0"))
    except Exception as err:
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        names = [n for n in ("tokenizer.json", "tokenizer_config.json") if (folder / n).exists()]
        raise ConfigError(
            f"{folder}: its tokenizer ({', '.join(names) or 'no tokenizer.json'}) cannot be used: {detail}",
            path=key,
        ) from None


def _safetensors_end(file: Path) -> int:
    """The size a safetensors file must have: 8 + header length + the last tensor's end."""
    with file.open("rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(n))
    ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
    return 8 + n + max(ends, default=0)


def folder_context_length(path: str | Path, default: int = 2048) -> int:
    """The longest sequence of the model in folder ``path`` (``max_position_embeddings`` of its
    ``config.json``; ``default`` when it does not say), read without loading the model."""
    try:
        cfg = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return default
    value = cfg.get("max_position_embeddings") if isinstance(cfg, dict) else None
    if value is None and isinstance(cfg, dict) and isinstance(cfg.get("text_config"), dict):
        value = cfg["text_config"].get("max_position_embeddings")
    return int(value) if isinstance(value, int) and value > 0 else default


def has_chat_template(path: str | Path) -> bool:
    """Whether the tokenizer of model folder ``path`` ships a chat template
    (``chat_template.jinja`` or ``chat_template`` in ``tokenizer_config.json``)."""
    folder = Path(path)
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    try:
        cfg = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and bool(cfg.get("chat_template"))


def context_length(spec: Any) -> int:
    """The longest sequence of a run's ``model`` section: ``model.max_seq_len``, else the context
    of the folder at ``model.path``."""
    return spec.max_seq_len or folder_context_length(spec.path or "")
