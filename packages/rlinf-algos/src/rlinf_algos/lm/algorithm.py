"""The ``grpo_lm`` algorithm class: what ``rlinf train examples/grpo_arith.yaml`` selects with
``algorithm: {name: grpo_lm}`` once the plugin registers it. Imports pydantic and rlinf_core
only; the training code loads inside :meth:`GRPOLM.run`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from rlinf_algos.lm.config import LMGRPOConfig, load_lm_sections
from rlinf_core.algorithm import Algorithm
from rlinf_core.errors import RlinfError

__all__ = ["GRPOLM"]


class GRPOLM(Algorithm):
    """GRPO on a language policy with an exact verifier; components rollout, reward, reference,
    actor (and agent in multi-agent mode)."""

    PLUGIN_NAME: ClassVar[str] = "grpo_lm"
    config_model: ClassVar[type[BaseModel]] = LMGRPOConfig
    components: ClassVar[tuple[str, ...]] = ("rollout", "reward", "reference", "actor", "agent")

    def run(self, scheduler: Any, run_config: Any, run_dir: Any) -> dict[str, Any]:
        """Train in this process (``scheduler`` must be ``None`` until the distributed runner
        places the workers) and return the summary (``accuracy_before``, ``accuracy_after``...)."""
        if scheduler is not None:
            raise RlinfError(
                "algorithm 'grpo_lm': the distributed runner lands with the runtime; "
                "call run(scheduler=None, ...) to train in this process"
            )
        run = load_lm_sections(run_config)
        from rlinf_algos.lm.trainer import train_lm

        return train_lm(run, Path(run_dir))
