"""The rlinf error hierarchy.

Every error meant for a user derives from :class:`RlinfError`. Its message says what failed and
what to do next; the ``rlinf`` CLI prints it without a traceback (set ``RLINF_DEBUG=1`` to see one).
Programming errors inside rlinf stay ordinary Python exceptions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "ChannelClosed",
    "ChannelEmpty",
    "ChannelError",
    "ChannelFull",
    "ChannelTimeout",
    "ConfigError",
    "ConfigProblem",
    "HardwareError",
    "NetworkError",
    "PeerLost",
    "PluginError",
    "RlinfError",
    "SchedulerError",
    "WaitTimeout",
]


class RlinfError(Exception):
    """Base class of every error rlinf reports to a user.

    ``exit_code`` is the status the CLI exits with when this error ends a command.
    """

    exit_code: int = 1


@dataclass(frozen=True)
class ConfigProblem:
    """One problem in a configuration: where it is (a YAML path such as
    ``cluster.node_groups[1].node_ranks``) and what is wrong there."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(RlinfError, ValueError):
    """Invalid user configuration (YAML, command-line overrides, plugin-owned sections).

    Holds every problem found, not only the first, so a user can fix them all in one go.
    ``str(err)`` is one line per problem, each starting with its YAML path.
    """

    exit_code = 2

    def __init__(self, problems: str | ConfigProblem | Iterable[ConfigProblem], path: str = "") -> None:
        if isinstance(problems, str):
            problems = [ConfigProblem(path, problems)]
        elif isinstance(problems, ConfigProblem):
            problems = [problems]
        self.problems: list[ConfigProblem] = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    def prefixed(self, prefix: str) -> ConfigError:
        """The same problems with ``prefix`` prepended to every path (``cluster`` + ``num_nodes``)."""
        return ConfigError([ConfigProblem(join_path(prefix, p.path), p.message) for p in self.problems])


def join_path(prefix: str, path: str) -> str:
    """Join two YAML path fragments: ``join_path("a", "b") == "a.b"``, ``join_path("a", "[0]") == "a[0]"``."""
    if not prefix:
        return path
    if not path:
        return prefix
    return f"{prefix}{path}" if path.startswith("[") else f"{prefix}.{path}"


def format_path(parts: Sequence[str | int]) -> str:
    """Render location parts as a YAML path: ``("cluster", "node_groups", 1, "label")`` ->
    ``cluster.node_groups[1].label``."""
    out = ""
    for part in parts:
        out = join_path(out, f"[{part}]" if isinstance(part, int) else str(part))
    return out


class PluginError(RlinfError):
    """A plugin failed to load, registered something invalid, or a name is not registered."""


class HardwareError(RlinfError):
    """Hardware is missing, unreachable or misconfigured (a robot that does not answer, a camera
    serial that is not plugged in). The message names the device and the node."""


class NetworkError(RlinfError):
    """An overlay network could not be brought up, joined or verified."""


class SchedulerError(RlinfError):
    """The cluster could not be brought up, or a component could not be placed or launched."""


class WaitTimeout(RlinfError, TimeoutError):
    """A wait ran out of time. The message says what was waited for and for how long."""


class PeerLost(RlinfError):
    """A wait ended because a peer process it depended on is gone (it died, or stopped answering).

    The message names the peer first (role, rank, pid, node), then who waited, for what and for
    how long. It is a *consequence*: where the peer's own failure is known too (a scheduler
    collecting the failures of one call), that failure is the root cause and is reported first;
    this one follows it."""


class ChannelError(RlinfError):
    """Base class of Channel errors."""


class ChannelClosed(ChannelError):
    """The channel was closed; raised to every waiter and to any later ``put``/``get``."""


class ChannelTimeout(ChannelError, WaitTimeout):
    """A blocking channel operation ran out of time."""


class ChannelFull(ChannelError):
    """``put_nowait`` on a queue that is at ``maxsize``."""


class ChannelEmpty(ChannelError):
    """``get_nowait`` on an empty queue (or one without enough weight for ``get_batch``)."""
