"""The reward component: the exact verifier over decoded responses.

Pure Python (no torch, no model state), so it can be placed on CPU-only nodes; what it gets and
returns is plain lists and numpy arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rlinf_algos.lm.task import verify_chain
from rlinf_algos.lm.tokenizer import CharTokenizer
from rlinf_core.worker import Worker

__all__ = ["RewardWorker"]


class RewardWorker(Worker):
    """Scores final responses with :func:`~rlinf_algos.lm.task.verify_chain`.

    Args:
        tokenizer: a :class:`CharTokenizer` or its ``to_dict()`` form.
        format_reward: reward of a well-formed chain with a wrong answer.
    """

    def __init__(self, tokenizer: CharTokenizer | dict[str, Any], format_reward: float = 0.0) -> None:
        self.tokenizer = (
            tokenizer if isinstance(tokenizer, CharTokenizer) else CharTokenizer.from_dict(tokenizer)
        )
        self.format_reward = float(format_reward)

    def compute(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Score a batch of episodes.

        Args:
            batch: ``response_ids``: per episode the ids of its final response (anything with
                ``tolist()`` or a list of ints; empty when the episode failed before a final
                answer); ``answers``: per episode the exact integer answer.

        Returns:
            ``rewards`` ``float32 [E]``, ``correct`` ``bool [E]``, ``well_formed`` ``bool [E]``
            and ``reasons`` (list of str).
        """
        responses: Sequence[Any] = batch["response_ids"]
        answers: Sequence[int] = batch["answers"]
        if len(responses) != len(answers):
            raise ValueError(f"RewardWorker: {len(responses)} responses but {len(answers)} answers")
        rewards = np.zeros(len(answers), dtype=np.float32)
        correct = np.zeros(len(answers), dtype=bool)
        formed = np.zeros(len(answers), dtype=bool)
        reasons = []
        for i, (ids, ans) in enumerate(zip(responses, answers, strict=True)):
            ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
            v = verify_chain(self.tokenizer.decode(ids), int(ans), self.format_reward)
            rewards[i], correct[i], formed[i] = v.reward, v.correct, v.well_formed
            reasons.append(v.reason)
        return {"rewards": rewards, "correct": correct, "well_formed": formed, "reasons": reasons}
