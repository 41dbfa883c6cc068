"""The hardware-plugin interface: non-accelerator hardware (robots, special devices) that a node
group owns and that components are placed on by hardware rank.

A vendor package ships one :class:`HardwarePlugin` subclass through the ``rlinf_register_hardware``
hook. rlinf validates each entry of a node group's ``hardware.configs`` with the plugin's
``config_model``, asks :meth:`HardwarePlugin.enumerate` which devices every node owns (this
numbers the group's hardware ranks), and, at run time or in ``rlinf hw check``, calls
:meth:`HardwarePlugin.validate` for each device. Planning never contacts hardware.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlinf_core.config import validation_problems
from rlinf_core.errors import ConfigError

__all__ = ["HardwareConfig", "HardwarePlugin", "HardwareResource"]


class HardwareConfig(BaseModel):
    """Base model of one entry of ``hardware.configs``; plugins extend it with their own fields.

    Unknown keys are rejected so a typo (``robot_ipp``) is an error, not a silent default.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    node_rank: int = Field(ge=0, description="The node (RLINF_NODE_RANK) this device is attached to.")


@dataclass(frozen=True)
class HardwareResource:
    """One device as placement sees it.

    Attributes:
        type: the plugin's ``PLUGIN_NAME`` (e.g. ``"Franka"``).
        node_rank: the node that owns the device.
        local_rank: the device's index among this type's devices on that node.
        config: the validated config entry that describes the device.
        info: extra, plugin-defined facts handed to the worker placed on the device.
    """

    type: str
    node_rank: int
    local_rank: int
    config: HardwareConfig
    info: Mapping[str, Any] = field(default_factory=dict)


class HardwarePlugin:
    """Base class of a hardware type. Subclass it, set ``PLUGIN_NAME`` and ``config_model``.

    Class attributes:
        PLUGIN_NAME: the type name users write in ``hardware.type``; matched case-insensitively.
        config_model: the pydantic model of one ``hardware.configs`` entry (a :class:`HardwareConfig`).
        isolates_accelerators: ``True`` if a process placed on this hardware should see only the
            accelerators the hardware names; ``False`` (the default) lets it see every accelerator
            of its node.

    All methods are class methods: a hardware type is stateless; its state is its configs.
    """

    PLUGIN_NAME: ClassVar[str]
    config_model: ClassVar[type[HardwareConfig]] = HardwareConfig
    isolates_accelerators: ClassVar[bool] = False

    @classmethod
    def parse_config(cls, raw: Any, path: str = "") -> HardwareConfig:
        """Validate one raw config entry; raise :class:`ConfigError` whose paths start with ``path``."""
        if isinstance(raw, cls.config_model):
            return raw
        if not isinstance(raw, Mapping):
            raise ConfigError(
                f"expected a mapping of {cls.PLUGIN_NAME} settings, got {type(raw).__name__}", path
            )
        try:
            return cls.config_model.model_validate(dict(raw))
        except ValidationError as err:
            raise ConfigError(validation_problems(err, prefix=path)) from None

    @classmethod
    def enumerate(cls, node_rank: int, configs: Sequence[HardwareConfig]) -> list[HardwareResource]:
        """The devices of this type that node ``node_rank`` owns, in hardware-rank order.

        ``configs`` are all of a node group's validated entries. The default gives one device per
        entry whose ``node_rank`` matches, in config order. Override it when one entry describes
        several devices or when the count comes from the node (environment variables).
        """
        mine = [c for c in configs if c.node_rank == node_rank]
        return [HardwareResource(cls.PLUGIN_NAME, node_rank, i, c) for i, c in enumerate(mine)]

    @classmethod
    def validate(cls, resource: HardwareResource, *, timeout: float = 5.0) -> None:
        """Check that the device is present and usable; raise :class:`~rlinf_core.errors.HardwareError`
        naming the device and the node if not. Runs on the device's node. The default checks nothing."""
        return None
