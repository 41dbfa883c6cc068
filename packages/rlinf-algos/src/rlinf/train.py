"""``python -m rlinf.train CONFIG [OVERRIDES...] [OPTIONS]``: the same as ``rlinf train``."""

from __future__ import annotations

from rlinf import forward

if __name__ == "__main__":
    forward("train")
