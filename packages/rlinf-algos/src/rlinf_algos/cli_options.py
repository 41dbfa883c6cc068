"""Options shared by the commands that write a run directory (``rlinf train``, ``rlinf sft``)."""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["overwrite_option", "run_dir_option", "trust_option"]

run_dir_option = click.option(
    "--run-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the run writes (default: runs/<config name>-<time>).",
)
"""``--run-dir`` of the commands that write a run directory (``train``, ``sft``)."""

overwrite_option = click.option(
    "--overwrite",
    is_flag=True,
    help="RUN_DIR may hold a run: move it aside to RUN_DIR.replaced-<time> and start anew.",
)
"""``--overwrite`` of the commands that write a run directory."""

trust_option = click.option(
    "--trust",
    is_flag=True,
    help="A run made elsewhere may run the code it names (a module:Env-vN env id, env wrappers, "
    "tool and reward files, model.trust_remote_code) that no installed plugin provides; without "
    "it such a run is refused, naming each reference.",
)
"""``--trust`` of the commands that open a run directory (``eval``, ``train --resume``)."""
