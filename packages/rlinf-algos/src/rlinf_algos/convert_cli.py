"""``rlinf convert RUN --trust``: rewrite a run directory of an earlier rlinf version (pickled
``policy.pt``, ``checkpoints/step_<n>.pt``, ``warm_start.pt``) as safetensors state files
(:func:`rlinf_algos.run_files.convert_run`)."""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["convert_cmd"]


@click.command("convert")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--trust",
    is_flag=True,
    help="Load the run's pickles with torch.load(weights_only=False), which runs any code they name. "
    "Only for a run whose origin you trust.",
)
def convert_cmd(run_dir: Path, trust: bool) -> None:
    """Convert the pickles an earlier rlinf version wrote into RUN_DIR (policy.pt,
    checkpoints/step_<n>.pt, warm_start.pt) into the safetensors files rlinf reads now
    (policy.safetensors, checkpoints/step_<n>.safetensors, warm_start.safetensors). Each new file
    is written atomically beside its pickle, which is left as it was (delete it once the run
    evaluates and resumes). Without --trust nothing is loaded and the command exits 2."""
    from rlinf_algos.run_files import convert_run, legacy_files

    if trust and not list(legacy_files(run_dir)):
        click.echo(
            f"{run_dir}: nothing to convert (no policy.pt, warm_start.pt or checkpoints/step_<n>.pt "
            "without a .safetensors twin)"
        )
        return
    done = convert_run(run_dir, trust=trust)
    for old, new in done:
        click.echo(f"converted {old} -> {new.name}")
    click.echo(
        f"{len(done)} file(s) converted; the .pt files are left as they were (rlinf reads the .safetensors ones)"
    )
