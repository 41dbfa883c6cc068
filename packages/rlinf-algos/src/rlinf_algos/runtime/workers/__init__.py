"""One worker class per role, each a thin process host that hands the domain work to the body
the run's flow gives it (:mod:`~rlinf_algos.runtime.workers.base`):

- :mod:`~rlinf_algos.runtime.workers.env`: :class:`EnvWorker`, gymnasium vector envs in stages;
- :mod:`~rlinf_algos.runtime.workers.rollout`: :class:`RolloutWorker`, the sampling policy;
- :mod:`~rlinf_algos.runtime.workers.actor`: :class:`ActorWorker`, the learner (group);
- :mod:`~rlinf_algos.runtime.workers.reward`: :class:`RewardWorker`, scoring;
- :mod:`~rlinf_algos.runtime.workers.reference`: :class:`ReferenceWorker`, the frozen policy;
- :mod:`~rlinf_algos.runtime.workers.agent`: :class:`AgentWorker`, episodes against the rollouts;
- :mod:`~rlinf_algos.runtime.workers.tool`: :class:`ToolWorker`, the tools the agents' episodes call.
"""

from __future__ import annotations

from rlinf_algos.runtime.workers.actor import ActorWorker
from rlinf_algos.runtime.workers.agent import AgentWorker
from rlinf_algos.runtime.workers.env import EnvWorker
from rlinf_algos.runtime.workers.reference import ReferenceWorker
from rlinf_algos.runtime.workers.reward import RewardWorker
from rlinf_algos.runtime.workers.rollout import RolloutWorker
from rlinf_algos.runtime.workers.tool import ToolWorker

__all__ = [
    "ActorWorker",
    "AgentWorker",
    "EnvWorker",
    "ReferenceWorker",
    "RewardWorker",
    "RolloutWorker",
    "ToolWorker",
]

WORKERS = {
    cls.role: cls
    for cls in (EnvWorker, RolloutWorker, ActorWorker, RewardWorker, ReferenceWorker, AgentWorker, ToolWorker)
}
"""The worker class of each role name."""
