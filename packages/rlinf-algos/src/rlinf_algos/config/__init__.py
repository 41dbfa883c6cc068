"""A run's configuration: its sections, and the one pipeline every entry point takes.

The sections every embodied run shares (``env``, ``model``, ``runner``, ``rollout``, ``actor``)
are :mod:`rlinf_algos.config.sections`, re-exported here (light: pydantic and rlinf_core). The
pipeline, from a file to a run that is ready to start:

1. compose: :func:`rlinf_core.compose.compose` (defaults lists, ``${...}``, command-line overrides);
2. translate: :mod:`rlinf_algos.config.translate` (seed 003's worker pools, RLinf's keys);
3. validate once: :mod:`rlinf_algos.config.validate` (every problem with its YAML path, one
   :class:`~rlinf_core.errors.ConfigError`);
4. plan: the placement, when asked.

:func:`rlinf_algos.config.prepare.prepare_run` runs them and returns a
:class:`~rlinf_algos.config.prepare.PreparedRun`; ``rlinf train`` (``--dry-run``,
``--print-config``, ``--multirun``), :func:`rlinf_algos.train`, ``rlinf sft`` and ``rlinf bench``
all go through it. Import the pipeline from its module (it is not re-exported here, so that
importing the sections stays light).
"""

from __future__ import annotations

from rlinf_algos.config.sections import *  # noqa: F403 - the sections, re-exported
from rlinf_algos.config.sections import __all__  # noqa: F401
