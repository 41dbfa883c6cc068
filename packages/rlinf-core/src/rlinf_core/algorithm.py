"""The algorithm interface: an RL algorithm's options and its macro flow."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from pydantic import BaseModel

__all__ = ["Algorithm"]


class Algorithm(ABC):
    """Base class of a training algorithm (``ppo``, ``sac``, ``grpo``...).

    Class attributes:
        PLUGIN_NAME: the name ``algorithm.name`` selects.
        config_model: validates the ``algorithm`` section (paths in errors start at ``algorithm``).
        components: the component names its flow needs placed (``("actor", "rollout", "env")``).

    The macro flow lives in :meth:`run`; how each component is placed is the cluster
    configuration's business, so the same flow runs collocated, disaggregated or hybrid.
    """

    PLUGIN_NAME: ClassVar[str]
    config_model: ClassVar[type[BaseModel]]
    components: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: BaseModel) -> None:
        self.config = config

    @abstractmethod
    def run(self, scheduler: Any, run_config: Any, run_dir: Any) -> dict[str, Any]:
        """Run training to the end of its budget and return its summary metrics."""
