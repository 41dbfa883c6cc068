"""Options shared by the commands that write a run directory (``rlinf train``, ``rlinf sft``)."""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["overwrite_option", "run_dir_option"]

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
