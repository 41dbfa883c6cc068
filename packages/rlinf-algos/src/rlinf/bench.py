"""``python -m rlinf.bench throughput CONFIG [--workers 1,2,4]``: the same as ``rlinf bench``."""

from __future__ import annotations

from rlinf import forward

if __name__ == "__main__":
    forward("bench")
