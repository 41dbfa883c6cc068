"""The training runtime: never names an algorithm.

- :mod:`~rlinf_algos.runtime.training`: ``rlinf train``'s entry point (validation, dry run,
  scheduler start-up);
- :mod:`~rlinf_algos.runtime.local`: any recipe in one process;
- :mod:`~rlinf_algos.runtime.distributed`: any recipe on placed workers;
- :mod:`~rlinf_algos.runtime.workers`: the generic env and rollout workers;
- :mod:`~rlinf_algos.runtime.actor`: the actor worker (the learner, on one process or many).
"""
