"""Pydantic v2 models of the ``cluster`` section, as users write it in YAML.

These models check structure and types; :func:`rlinf_core.cluster.resolve_cluster` then checks the
rules that span fields (node ranks against ``num_nodes``, overlapping env configs, hardware configs
against the hardware plugin's own model, component placement against the node groups) and
reports every problem at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rlinf_core.cluster.ranks import RANK_EXPR_HELP

__all__ = [
    "RESERVED_LABELS",
    "ClusterConfig",
    "ComponentPlacementSpec",
    "HardwareSpec",
    "NodeGroup",
    "NodeGroupEnvConfig",
]

RESERVED_LABELS = ("cluster", "node")
"""``cluster``: the default group of all nodes; ``node``: all nodes, hardware ignored (ranks are
node ranks)."""


def _rank_shape(value: Any) -> Any:
    """Structural check of a rank expression (bounds are checked when resolving)."""
    ok_scalar = (int, str)
    if isinstance(value, bool) or not (
        isinstance(value, ok_scalar)
        or (
            isinstance(value, list)
            and all(isinstance(x, ok_scalar) and not isinstance(x, bool) for x in value)
        )
    ):
        raise ValueError(f"expected {RANK_EXPR_HELP}, got {value!r}")
    return value


def _env_value(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise ValueError(f"env var {key!r} must be a string or number, got {value!r}")


def _env_key(key: Any) -> str:
    if not isinstance(key, str) or not key or "=" in key or "\0" in key or key != key.strip():
        raise ValueError(f"{key!r} is not a valid environment variable name")
    return key


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NodeGroupEnvConfig(_Model):
    """The software environment of some nodes of a group.

    ``env_vars`` is a list of one-key mappings (``- GLOO_SOCKET_IFNAME: eth0``) or one plain mapping;
    it is normalized to a list of one-key mappings. A key may appear once.
    """

    node_ranks: Any = Field(description="A subset of the group's node ranks (a rank expression).")
    env_vars: list[dict[str, str]] = Field(default_factory=list)
    python_interpreter_path: str | None = None

    @field_validator("node_ranks")
    @classmethod
    def _ranks(cls, value: Any) -> Any:
        return _rank_shape(value)

    @field_validator("env_vars", mode="before")
    @classmethod
    def _normalize_env(cls, value: Any) -> list[dict[str, str]]:
        if value is None:
            return []
        if isinstance(value, Mapping):
            return [{_env_key(k): _env_value(k, v)} for k, v in value.items()]
        if not isinstance(value, list):
            raise ValueError(
                f"expected a list of one-key mappings or one mapping, got {type(value).__name__}"
            )
        out: list[dict[str, str]] = []
        seen: dict[str, int] = {}
        dups: list[str] = []
        for i, item in enumerate(value):
            if not isinstance(item, Mapping) or len(item) != 1:
                raise ValueError(
                    f"entry {i} must be a mapping with exactly one key (- NAME: value), got {item!r}"
                )
            ((k, v),) = item.items()
            key = _env_key(k)
            if key in seen:
                dups.append(f"{key} (entries {seen[key]} and {i})")
            seen.setdefault(key, i)
            out.append({key: _env_value(key, v)})
        if dups:
            raise ValueError(f"env var set more than once for the same nodes: {', '.join(dups)}")
        return out

    @field_validator("python_interpreter_path")
    @classmethod
    def _non_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be blank; leave it out to use the node's default interpreter")
        return value

    def env_dict(self) -> dict[str, str]:
        """``env_vars`` as one mapping."""
        return {k: v for item in self.env_vars for k, v in item.items()}


class HardwareSpec(_Model):
    """``hardware: {type, configs}``; each config is validated by the hardware plugin's model."""

    type: str = Field(min_length=1, description="A hardware type of an installed plugin (case-insensitive).")
    configs: list[Any] = Field(min_length=1, description="One entry per device; the plugin's model.")

    @field_validator("type")
    @classmethod
    def _strip(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value.strip()


class NodeGroup(_Model):
    """A set of nodes with the same hardware and software environment."""

    label: str = Field(description="Unique, case-sensitive; 'cluster' and 'node' are reserved.")
    node_ranks: Any = Field(description="A rank expression over 0..num_nodes-1.")
    env_configs: list[NodeGroupEnvConfig] = Field(default_factory=list)
    hardware: HardwareSpec | None = None

    @field_validator("label", mode="before")
    @classmethod
    def _label(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)  # `label: 4090` is a YAML int
        return value

    @field_validator("label")
    @classmethod
    def _label_text(cls, value: str) -> str:
        if not value or value != value.strip() or "," in value:
            raise ValueError(
                f"{value!r} is not a valid label: use a non-empty name without commas or surrounding spaces"
            )
        return value

    @field_validator("node_ranks")
    @classmethod
    def _ranks(cls, value: Any) -> Any:
        return _rank_shape(value)


class ComponentPlacementSpec(_Model):
    """The placement of one or more components: the group(s) whose hardware ranks ``placement``
    refers to (listed groups concatenate their rank spaces in order) and the placement string."""

    node_group: tuple[str, ...] = ("cluster",)
    placement: str

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        if isinstance(value, str | int) and not isinstance(value, bool):
            return {"placement": value}
        return value

    @field_validator("node_group", mode="before")
    @classmethod
    def _groups(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if isinstance(value, str):
            labels = [x.strip() for x in value.split(",")]
        elif isinstance(value, list | tuple):
            labels = []
            for x in value:
                if isinstance(x, int) and not isinstance(x, bool):
                    x = str(x)
                if not isinstance(x, str):
                    raise ValueError(f"group labels must be strings, got {x!r}")
                labels.append(x.strip())
        else:
            raise ValueError(f"expected a group label, 'a,b' or a list of labels, got {value!r}")
        if not labels or any(not x for x in labels):
            raise ValueError(f"empty group label in {value!r}")
        dup = sorted({x for x in labels if labels.count(x) > 1})
        if dup:
            raise ValueError(f"group {', '.join(map(repr, dup))} listed more than once")
        return tuple(labels)

    @field_validator("placement", mode="before")
    @classmethod
    def _placement(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return value


class ClusterConfig(_Model):
    """The ``cluster`` section: nodes, node groups and component placement."""

    num_nodes: int = Field(
        gt=0, le=1_000_000, strict=True, description="Total number of nodes (RLINF_NODE_RANK 0..N-1)."
    )
    node_groups: list[NodeGroup] = Field(default_factory=list)
    component_placement: dict[str, ComponentPlacementSpec] = Field(default_factory=dict)

    @field_validator("component_placement")
    @classmethod
    def _component_names(cls, value: dict[str, ComponentPlacementSpec]) -> dict[str, ComponentPlacementSpec]:
        for key in value:
            if any(not name.strip() for name in key.split(",")):
                raise ValueError(
                    f"empty component name in {key!r} (write names separated by commas: 'actor,rollout')"
                )
        return value
