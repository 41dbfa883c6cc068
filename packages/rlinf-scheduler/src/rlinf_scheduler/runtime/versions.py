"""Version agreement between the driver and the workers.

Ray freezes a node's Python environment at ``ray start``; a node that runs another rlinf release
than the driver fails in confusing ways much later (a pickled class without a field, a method that
does not exist). So, unless code sync ships the code (:mod:`rlinf_scheduler.runtime.code_sync`),
every worker compares its installed rlinf distributions with the driver's before it builds its
:class:`~rlinf_core.worker.Worker` and fails fast, naming the node, the package and both versions.

Pure Python (no Ray).
"""

from __future__ import annotations

import importlib.metadata as md
from collections.abc import Mapping

from rlinf_core.errors import SchedulerError

__all__ = ["VersionMismatch", "check_versions", "local_versions", "rlinf_versions", "version_problems"]

NOT_INSTALLED = "not installed"


class VersionMismatch(SchedulerError):
    """A worker's rlinf distributions differ from the driver's."""


def rlinf_versions() -> dict[str, str]:
    """``{distribution: version}`` of every installed ``rlinf`` / ``rlinf-*`` distribution (the
    first found on ``sys.path`` wins, as for imports)."""
    found: dict[str, str] = {}
    for dist in md.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if (name == "rlinf" or name.startswith("rlinf-")) and name not in found:
            found[name] = dist.version
    return dict(sorted(found.items()))


def local_versions() -> dict[str, str]:
    """``ray`` and every rlinf distribution of this process's environment."""
    out = {"ray": _version("ray")}
    out.update(rlinf_versions())
    return out


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return NOT_INSTALLED


def version_problems(expected: Mapping[str, str], actual: Mapping[str, str], *, where: str) -> list[str]:
    """One line per rlinf distribution of ``expected`` (the driver's) whose version in ``actual``
    differs or is missing. ``where`` names the node (``node 1 (10.0.0.2)``)."""
    problems = []
    for dist, want in sorted(expected.items()):
        if dist == "ray":
            continue
        got = actual.get(dist, NOT_INSTALLED)
        if got != want:
            problems.append(f"{where}: {dist} is {got}, the driver has {want}")
    return problems


def check_versions(expected: Mapping[str, str], *, where: str) -> None:
    """Raise :class:`VersionMismatch` if this process's rlinf distributions differ from ``expected``."""
    problems = version_problems(expected, rlinf_versions(), where=where)
    if problems:
        raise VersionMismatch(
            "rlinf versions differ between the driver and a worker:\n  "
            + "\n  ".join(problems)
            + "\nInstall the same rlinf release on every node (then restart Ray there: `rlinf node stop`, "
            "`rlinf node start ...`), or ship the driver's code with RLINF_CODE_WORKING_DIR=auto."
        )
