"""The training runtime: one driver for every algorithm family; never names an algorithm.

- :mod:`~rlinf_algos.training`: ``rlinf train``'s entry point (validation, dry run,
  scheduler start-up);
- :mod:`~rlinf_algos.runtime.driver`: the one single controller of a run (records, checkpoints,
  resume, stops, worker deaths, the summary) over a flow's run;
- :mod:`~rlinf_algos.runtime.recovery`: what a dead worker costs (restarts in place, the learner
  from checkpoints, :class:`~rlinf_algos.runtime.recovery.RunFailed`);
- :mod:`~rlinf_algos.runtime.recorder`: metrics rows, the wall clock, episode statistics;
- :mod:`~rlinf_algos.runtime.stop`: SIGTERM / Ctrl-C between iterations, the process's RNG streams;
- :mod:`~rlinf_algos.runtime.workers`: one worker class per role (env, rollout, actor, reward,
  reference, agent), thin process hosts of the flow's bodies;

It imports no scheduler: weights, links, routing and placement come through
:class:`rlinf_core.Scheduler`'s interface (:mod:`rlinf_core.weights`, :mod:`rlinf_core.links`,
:mod:`rlinf_core.routing`), so any scheduler plugin runs every flow.
"""
