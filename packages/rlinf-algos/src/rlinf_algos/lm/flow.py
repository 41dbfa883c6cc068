"""The language-model flow (``grpo_lm``, ``ppo_lm``): what the role workers get of a run."""

from __future__ import annotations

from typing import Any

from rlinf_algos.lm.config import LMRunConfig
from rlinf_algos.lm.remote_generate import run_config

__all__ = ["LMFlow"]


class LMFlow:
    """A language-model run's flow; it travels to the worker processes (as the run's sections,
    plain data), where :meth:`body` builds each role's domain object (:mod:`rlinf_algos.lm.roles`)."""

    def __init__(self, run: LMRunConfig) -> None:
        self.data = run.model_dump(mode="json")
        self._run: LMRunConfig | None = run

    def __getstate__(self) -> dict[str, Any]:
        return {"data": self.data}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.data, self._run = state["data"], None

    @property
    def run(self) -> LMRunConfig:
        if self._run is None:
            self._run = run_config(self.data)
        return self._run

    def body(self, role: str, host: Any) -> Any:
        """The body of ``role`` in its worker's process (``host``)."""
        from rlinf_algos.lm import roles

        bodies = {
            "rollout": roles.LMRollout,
            "reward": roles.LMScorer,
            "reference": roles.LMReference,
            "actor": roles.LMActor,
            "agent": roles.AgentPlayer,
        }
        if role not in bodies:
            from rlinf_core.errors import RlinfError

            raise RlinfError(f"a language-model run has no {role!r} role (it has {', '.join(bodies)})")
        return bodies[role](host, self.run)
