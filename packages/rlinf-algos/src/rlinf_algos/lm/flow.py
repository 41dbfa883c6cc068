"""The language-model flow (``grpo_lm``, ``ppo_lm``): what the one driver runs of a run.

A run (:class:`LMRun`): the supervised warm start (:func:`~rlinf_algos.lm.trainer.prepare_models`),
an evaluation of the warm-started policy on the held-out set, ``algorithm.iterations``
iterations, and a final evaluation. One iteration is the macro flow the roles carry out on the
scheduler's workers (:mod:`rlinf_algos.lm.placed`; ``runner.scheduler: local`` runs them in
this process)::

    problems --agent + rollout engine--> episodes (token sequences)          "generate"
    final responses --verifier--> rewards                                    "reward"
    sequences --frozen reference--> ref log-probs                            "reference"
    batch --learner update--> new weights --> the rollout engine             "update", "sync"

The run directory gets, beside what the driver writes (``metrics.csv`` and ``metrics.jsonl``, one
row per iteration: reward, response length, KL, clip fraction, bytes per weight publish, the
seconds of each phase; ``checkpoints/step_<n>/``, the newest two kept; ``summary.json``):
``config.yaml`` (every section as validated), ``base_model/`` (when ``model.init`` built it),
``warm_start/`` (the warm start's ``rlinf sft`` run), ``policy/`` (a model folder
``from_pretrained`` loads, merged when LoRA), ``adapter/`` (the peft adapter, with LoRA),
``eval_before.json``/``eval_after.json`` (per-problem outcomes), ``accuracy.png``. A checkpoint
holds the learner (weights or adapter, optimiser, update count: the learning-rate schedule's
position, minibatch order), every rollout rank's sampling streams, the driver's RNG streams and
the training data's position, so a resumed run takes the batches an uninterrupted one takes and
logs the same values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rlinf_algos.flow import Flow, FlowRun
from rlinf_algos.lm.config import LMRunConfig
from rlinf_algos.lm.remote_generate import run_config
from rlinf_core.errors import RlinfError

__all__ = ["LMFlow", "train_lm"]


class LMFlow(Flow):
    """A language-model run's flow. It travels to the worker processes as the run's sections
    (plain data), where :meth:`body` builds each role's domain object (:mod:`rlinf_algos.lm.roles`).

    Args:
        run: the validated sections (as the user gave them; the run resolves the model folder).
        cluster: the ``cluster`` section (``config.yaml`` repeats it).
    """

    checkpoint_layout = "folder"
    keep_checkpoints = 2
    final_checkpoint = True

    def __init__(self, run: LMRunConfig, cluster: Mapping[str, Any] | None = None) -> None:
        self.data = run.model_dump(mode="json")
        self._run: LMRunConfig | None = run
        self.cluster = dict(cluster) if cluster is not None else None

    def __getstate__(self) -> dict[str, Any]:
        return {"data": self.data, "cluster": self.cluster}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.data, self.cluster, self._run = state["data"], state["cluster"], None

    @property
    def run(self) -> LMRunConfig:
        if self._run is None:
            self._run = run_config(self.data)
        return self._run

    def with_run(self, run: LMRunConfig) -> LMFlow:
        """The same flow over ``run`` (the workers load the run's resolved policy folder)."""
        return LMFlow(run, self.cluster)

    @property
    def name(self) -> str:
        return self.run.algorithm.name

    @property
    def runner(self) -> Any:
        return self.run.runner

    def placed(self, driver: Any) -> FlowRun:
        from rlinf_algos.lm.placed import LMPlacedRun

        return LMPlacedRun(driver, self)

    def body(self, role: str, host: Any) -> Any:
        """The body of ``role`` in its worker's process (``host``)."""
        from rlinf_algos.lm import roles

        bodies = {
            "rollout": roles.LMRollout,
            "reward": roles.LMScorer,
            "reference": roles.LMReference,
            "actor": roles.LMActor,
            "agent": roles.AgentPlayer,
            "tool": roles.tool_server,
        }
        if role not in bodies:
            raise RlinfError(f"a language-model run has no {role!r} role (it has {', '.join(bodies)})")
        return bodies[role](host, self.run)


def train_lm(
    run: LMRunConfig,
    run_dir: str | Path,
    log: Callable[[str], None] | None = print,
    progress: Callable[[dict[str, Any]], None] | None = None,
    cluster: Mapping[str, Any] | None = None,
    resume: bool = False,
    scheduler: Any = None,
    callbacks: Mapping[str, Callable[..., Any]] | None = None,
    write_config: bool = True,
) -> dict[str, Any]:
    """Run ``run`` with the one driver: in this process (``scheduler=None``) or on workers a
    started scheduler places; ``log`` gets the lines for people (``None``: silent), ``progress``
    every metrics row. Returns the summary (also in ``run_dir/summary.json``; the run directory
    is described in the module docstring). ``write_config``: write ``config.yaml`` (atomically,
    once, before the run starts); ``rlinf train`` has written it already and passes ``False``."""
    from rlinf_algos.runtime.driver import Driver

    if write_config:
        import yaml

        from rlinf_algos.lm.config import resolved_lm_config
        from rlinf_core.compose import mask_secrets
        from rlinf_core.io import atomic_write_text

        Path(run_dir).mkdir(parents=True, exist_ok=True)
        data = mask_secrets(resolved_lm_config(run, cluster))  # no oc.env values
        atomic_write_text(Path(run_dir) / "config.yaml", yaml.safe_dump(data, sort_keys=False))

    return Driver(
        LMFlow(run, cluster),
        scheduler,
        Path(run_dir),
        resume=resume,
        progress=progress,
        callbacks=callbacks,
        say=log,
    ).run()
