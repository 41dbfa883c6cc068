"""The reference role: a frozen copy of the initial policy whose log-probabilities the KL term
reads. The host takes version 0 of the learner's weight sync (the warm start; with LoRA a
language-model body keeps the base weights and disables the adapter), leaves the sync (a one-time
reader: it must not hold up the publisher's later broadcasts) and hands the weights to the body to
freeze; the body computes the log-probabilities of a batch and passes them on.

A restarted reference (its process died: the driver restarts it in place,
:mod:`rlinf_algos.runtime.recovery`) does not read the weight sync again (it has moved on past
version 0): :meth:`ReferenceWorker.reload` freezes the same weights from what the driver gives it
(an embodied flow keeps the small frozen policy's state) or, given none, from the body's own source
(a language-model body loads the model folder the actor loaded version 0 from).

The body: ``freeze(spec, state_dict)`` (``state_dict`` ``None``: from its own source, when it has
one), ``log_probs(*args, **kwargs)`` (``{"aborted": True}`` when the driver ended the iteration)
and, when it holds state a checkpoint keeps, ``state()`` / ``load(state)``.
"""

from __future__ import annotations

from typing import Any

from rlinf_algos.runtime.workers.base import RoleWorker
from rlinf_core.errors import RlinfError

__all__ = ["ReferenceWorker"]


class ReferenceWorker(RoleWorker):
    """The reference component's process (see the module docstring)."""

    role = "reference"

    def configure(self, spec: dict[str, Any] | None = None) -> int:
        """Freeze version 0 of the weights (the policy ``spec`` describes; ``None`` for a flow
        whose model is known up front); returns the version held."""
        if self.weights is None:
            raise RlinfError(f"reference rank {self.rank}: no weight sync to read (the driver passes one)")
        try:
            version, sd = self.weights.fetch(min_version=0, timeout=self.timeout)
            self.body.freeze(spec, sd)  # the body clones what it keeps
        finally:
            self.weights.close()  # a one-time reader leaves the sync's group
        return int(version)

    def reload(self, spec: dict[str, Any] | None = None, state: dict[str, Any] | None = None) -> None:
        """Freeze the reference's weights again in a restarted process, without the weight sync:
        ``state`` (the frozen weights the driver kept), or ``None``: the body loads them from
        where version 0 came from (the model folder)."""
        self.body.freeze(spec, state)

    def log_probs(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The frozen policy's log-probabilities of a batch, passed on as the flow's body does."""
        return self._body_call("log_probs")(*args, **kwargs)

    def state(self) -> dict[str, Any]:
        return self._body_call("state")()

    def load(self, state: dict[str, Any]) -> None:
        self._body_call("load")(state)
