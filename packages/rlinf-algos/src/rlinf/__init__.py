"""``python -m rlinf.train CONFIG`` and ``python -m rlinf.bench throughput CONFIG``, as RLinf's
documents (seed 003) launch them: a thin import package that forwards to the ``rlinf`` command
(:func:`rlinf_core.cli.main`), shipped in the rlinf-algos distribution.

Nothing else lives here: the library is ``rlinf_core``, ``rlinf_scheduler``, ``rlinf_algos``...
(RLinf's own distribution also installs an ``rlinf`` package: install one of the two in an
environment, not both.)
"""

from __future__ import annotations

import sys

__all__ = ["forward"]


def forward(command: str, argv: list[str] | None = None) -> None:
    """Run ``rlinf COMMAND *argv`` (default: this process's arguments) and exit with its status."""
    from rlinf_core.cli import main

    main([command, *(sys.argv[1:] if argv is None else argv)])
