"""The reference role: a frozen copy of the initial policy whose log-probabilities the KL term
reads. The host takes version 0 of the learner's weight broadcast (the warm start; with LoRA a
language-model body keeps the base weights and disables the adapter) and hands it to the body to
freeze; the body computes the log-probabilities of a batch and passes them on.

The body: ``freeze(spec, state_dict)``, ``log_probs(*args, **kwargs)`` (``{"aborted": True}``
when the driver ended the iteration) and, when it holds state a checkpoint keeps,
``state()`` / ``load(state)``.
"""

from __future__ import annotations

from typing import Any

from rlinf_algos.runtime.transport import connect_weights
from rlinf_algos.runtime.workers.base import RoleWorker

__all__ = ["ReferenceWorker"]


class ReferenceWorker(RoleWorker):
    """The reference component's process (see the module docstring)."""

    role = "reference"

    def configure(self, spec: dict[str, Any] | None = None) -> int:
        """Freeze version 0 of the weights (the policy ``spec`` describes; ``None`` for a flow
        whose model is known up front); returns the version held."""
        wb = connect_weights(self.weights_name, self.timeout)
        version, sd = wb.fetch(min_version=0, timeout=self.timeout)
        self.body.freeze(spec, sd)
        return int(version)

    def log_probs(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The frozen policy's log-probabilities of a batch, passed on as the flow's body does."""
        return self._body_call("log_probs")(*args, **kwargs)

    def state(self) -> dict[str, Any]:
        return self._body_call("state")()

    def load(self, state: dict[str, Any]) -> None:
        self._body_call("load")(state)
