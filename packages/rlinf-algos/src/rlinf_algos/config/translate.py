"""Step 2 of the config pipeline: the other forms a run configuration is written in, made
rlinf's ordinary sections (``cluster``, ``algorithm``, ``env``, ``model``, ``runner``, ``rollout``,
``actor``) before anything validates them.

- seed 003's worker-pool form (``algorithm: ppo``, ``ray_cluster``, ``rollout_worker``,
  ``trainer``, ``reward_worker``...): expanded by :mod:`rlinf_algos.config.seed_form` (its
  ``cluster`` part by :func:`rlinf_core.pools.expand_pools`), every problem named by the seed key;
- ``algorithm: ppo`` beside a ``cluster`` section: ``algorithm: {name: ppo}``;
- RLinf's ``cluster`` keys rlinf does not implement (:mod:`rlinf_core.compat`): dropped, with
  one warning naming them; unknown keys stay (and are errors).

Pure data in, data out: nothing is logged here (:class:`Translation` holds the warnings and the
expansion's notes for the caller to print).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlinf_core.errors import ConfigError

if TYPE_CHECKING:
    from rlinf_core.plugins import PluginHost

__all__ = ["Translation", "accept_rlinf_keys", "translate"]


@dataclass(frozen=True)
class Translation:
    """What :func:`translate` made of a composed config: ``data`` (the ordinary sections),
    ``expansion`` (the worker-pool form's :class:`~rlinf_algos.config.seed_form.SeedExpansion`,
    or ``None``) and ``warnings`` (one line each: RLinf settings accepted and ignored)."""

    data: dict[str, Any]
    expansion: Any = None
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def notes(self) -> list[str]:
        """What the worker-pool form became, one line per mapping or fallback (none otherwise)."""
        return list(self.expansion.notes) if self.expansion is not None else []

    def translate_error(self, err: ConfigError) -> ConfigError:
        """``err`` (found in the ordinary sections) with its problems named by the keys the user
        wrote (``rollout_worker (became cluster.component_placement.rollout.placement)``)."""
        return self.expansion.translate_error(err) if self.expansion is not None else err


def translate(data: Mapping[str, Any], host: PluginHost) -> Translation:
    """The ordinary form of ``data`` (see the module docstring). Raises one :class:`ConfigError`
    with every problem of a worker-pool config, each named by its seed key."""
    from rlinf_algos.config.seed_form import expand_seed_form

    ordinary, expansion = expand_seed_form(data, host)
    ordinary, ignored = accept_rlinf_keys(ordinary)
    return Translation(ordinary, expansion, tuple(ignored))


def accept_rlinf_keys(data: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``(data without the cluster keys RLinf reads and rlinf does not implement, the warning
    naming them)`` (:mod:`rlinf_core.compat`); no warning when there are none."""
    from rlinf_core.compat import ignored_keys_warning, split_rlinf_cluster_keys

    out = dict(data)
    cleaned, ignored, _ = split_rlinf_cluster_keys(out.get("cluster"), keep_unknown=True)
    if not ignored:
        return out, []
    out["cluster"] = cleaned
    return out, [ignored_keys_warning(ignored)]
