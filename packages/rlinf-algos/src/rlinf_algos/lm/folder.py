"""Model folders, read without loading a model: is it a causal LM, how long is its context,
does its tokenizer have a chat template. What ``rlinf train --dry-run`` checks up front."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlinf_core.errors import ConfigError

__all__ = ["check_model_folder", "context_length", "folder_context_length", "has_chat_template"]


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
