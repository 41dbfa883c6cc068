"""The verifier: the task's scoring of final responses (what the reward role holds).

Pure Python (no torch, no model state), so it can be placed on CPU-only nodes; what it gets and
returns is plain lists and numpy arrays. The scoring itself is the task's
(:meth:`rlinf_algos.lm.tasks.LMTask.score`): the arithmetic verifier, or a data set's reward
function.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["Verifier"]


class Verifier:
    """Scores episodes with ``task.score``.

    Args:
        task: an :class:`~rlinf_algos.lm.tasks.LMTask`.
    """

    def __init__(self, task: Any) -> None:
        self.task = task

    def compute(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Score a batch of episodes.

        Args:
            batch: ``response_ids``: per episode the ids of its final response (anything with
                ``tolist()`` or a list of ints; empty when the episode failed before a final
                answer); ``answers``: per episode what the task's ``answer_of`` gave.

        Returns:
            ``rewards`` ``float32 [E]``, ``correct`` ``bool [E]``, ``well_formed`` ``bool [E]``
            and ``reasons`` (list of str).
        """
        responses: Sequence[Any] = batch["response_ids"]
        answers: Sequence[Any] = batch["answers"]
        if len(responses) != len(answers):
            raise ValueError(f"Verifier: {len(responses)} responses but {len(answers)} answers")
        ids = [r.tolist() if hasattr(r, "tolist") else list(r) for r in responses]
        return self.task.score(ids, answers)
