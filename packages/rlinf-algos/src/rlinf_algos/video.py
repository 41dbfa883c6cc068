"""Episode videos for ``rlinf eval --video``: MP4 where an ffmpeg encoder is installed
(``imageio`` with ``imageio-ffmpeg``: ``pip install rlinf-algos[video]``), else an animated GIF
(Pillow), written atomically."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["episode_video_name", "mp4_available", "write_video"]


def mp4_available() -> bool:
    """Whether MP4 can be encoded here (imageio and imageio-ffmpeg import)."""
    try:
        import imageio.v3  # noqa: F401
        import imageio_ffmpeg  # noqa: F401
    except Exception:
        return False
    return True


def episode_video_name(episode: int, seed: int, instruction: str | None) -> str:
    """``episode007_seed10007_reach-the-red-cube`` (no extension): the episode, its seed and its
    instruction, as a portable file name."""
    name = f"episode{episode:03d}_seed{seed}"
    if instruction:
        slug = re.sub(r"[^a-z0-9]+", "-", instruction.lower()).strip("-")[:60]
        if slug:
            name += f"_{slug}"
    return name


def write_video(stem: Path, frames: Sequence[np.ndarray], fps: int = 10) -> Path:
    """Write ``frames`` (``(H, W, 3)`` uint8 each) to ``stem.mp4`` (or ``stem.gif`` without an
    MP4 encoder); returns the path. The file appears whole or not at all."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    if not frames:
        raise ValueError(f"no frames to write to {stem}")
    arr = [np.ascontiguousarray(np.asarray(f, dtype=np.uint8)) for f in frames]
    mp4 = mp4_available()
    path = stem.with_name(stem.name + (".mp4" if mp4 else ".gif"))
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(fd)
    try:
        if mp4:
            import imageio.v3 as iio

            # even sizes for yuv420p; macro_block_size=1 keeps small frames as they are
            iio.imwrite(tmp, np.stack(arr), extension=".mp4", fps=fps, macro_block_size=1)
        else:
            from PIL import Image

            images = [Image.fromarray(a) for a in arr]
            images[0].save(
                tmp, format="GIF", save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0
            )
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 is for secrets; a video is an ordinary file
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
