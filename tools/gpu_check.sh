#!/usr/bin/env bash
# The device check (tools/gpu_check.py) on a machine without a network, where only torch,
# transformers, peft, pyarrow, pluggy, click, rich and pyyaml are installed: no uv, no Ray.
#
#   tools/gpu_check.sh --prepare           # here, with uv and a network: writes .whl/
#   tools/gpu_check.sh [--cpu] [--report PATH]   # there, from the repository root (with .whl/)
#
# --prepare builds the workspace's rlinf-core and rlinf-algos wheels (uv build) and downloads
# (pip download) the wheels the check imports beyond those eight packages, at the versions
# uv.lock pins: pydantic and its dependencies (pydantic-core for CPython 3.10 to 3.13 on
# x86_64 and aarch64 Linux; pip picks the one that fits), gymnasium with its own (the
# out-of-memory step's and the quickstart run's Pendulum), and pytest with its own (the
# `pytest -m gpu` step; packaging and pygments come with transformers and rich). It lists them in .whl/requirements.txt. Copy the repository
# with .whl/ to the GPU machine (git-ignored: rsync or scp the folder).
#
# Without --prepare it installs those wheels, and only those, into a temporary folder
# (pip install --no-index --no-deps --target) and runs the check with that folder first on
# PYTHONPATH; the other arguments go to tools/gpu_check.py. PYTHON names the interpreter
# (default python3), PIP the pip that installs for it (default: $PYTHON -m pip; another pip of
# the same Python version works, as --target only unpacks). Exit status: the check's (0: every
# step passed).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WHEELS="${RLINF_WHEELHOUSE:-$ROOT/.whl}"
PY="${PYTHON:-python3}"
read -ra PIP <<<"${PIP:-$PY -m pip}"
# beyond torch, transformers, peft, pyarrow, pluggy, click, rich, pyyaml (and what they bring)
EXTRA=(pydantic pydantic-core annotated-types typing-inspection typing-extensions
       gymnasium cloudpickle farama-notifications
       pytest pytest-timeout iniconfig)
CORE_PYTHONS=(3.10 3.11 3.12 3.13)
CORE_PLATFORMS=(manylinux_2_17_x86_64 manylinux_2_17_aarch64)

prepare() {
    command -v uv >/dev/null || { echo "gpu_check.sh --prepare needs uv (https://docs.astral.sh/uv/)" >&2; exit 2; }
    # pip downloads (uv has no download command); uv's own pip when this Python has none
    local dl=("${PIP[@]}")
    "${dl[@]}" --version >/dev/null 2>&1 || dl=(uv tool run pip)
    rm -rf "$WHEELS.tmp" && mkdir -p "$WHEELS.tmp"
    for pkg in rlinf-core rlinf-algos; do
        uv build --quiet --package "$pkg" --wheel --out-dir "$WHEELS.tmp" --directory "$ROOT"
    done
    # name==version of each wheel, as uv.lock pins it (and the workspace packages' own versions)
    uv run --no-sync --directory "$ROOT" python - "${EXTRA[@]}" >"$WHEELS.tmp/requirements.txt" <<'EOF'
import sys, tomllib
lock = tomllib.load(open("uv.lock", "rb"))["package"]
names = ["rlinf-core", "rlinf-algos", *sys.argv[1:]]
for name in names:
    versions = sorted({p["version"] for p in lock if p["name"] == name})
    if len(versions) != 1:
        sys.exit(f"uv.lock pins {len(versions)} versions of {name}: {versions}")
    print(f"{name}=={versions[0]}")
EOF
    pure=()
    core=""
    while IFS= read -r req; do
        case "$req" in
            rlinf-*) ;;
            pydantic-core==*) core="$req" ;;
            *) pure+=("$req") ;;
        esac
    done <"$WHEELS.tmp/requirements.txt"
    "${dl[@]}" download --quiet --no-deps --only-binary=:all: --dest "$WHEELS.tmp" "${pure[@]}"
    for v in "${CORE_PYTHONS[@]}"; do
        for plat in "${CORE_PLATFORMS[@]}"; do
            "${dl[@]}" download --quiet --no-deps --only-binary=:all: --dest "$WHEELS.tmp" \
                --python-version "$v" --platform "$plat" "$core"
        done
    done
    rm -rf "$WHEELS" && mv "$WHEELS.tmp" "$WHEELS"
    echo "wrote $(ls "$WHEELS"/*.whl | wc -l) wheels to $WHEELS ($(du -sh "$WHEELS" | cut -f1)); copy it with the repository"
}

if [[ "${1:-}" == "--prepare" ]]; then
    prepare
    exit 0
fi
if [[ ! -f "$WHEELS/requirements.txt" ]]; then
    echo "no wheelhouse at $WHEELS: run tools/gpu_check.sh --prepare on a machine with uv and a network, then copy .whl/ here" >&2
    exit 2
fi
SITE="$(mktemp -d -t rlinf-gpu-check-site.XXXXXX)"
trap 'rm -rf "$SITE"' EXIT
"${PIP[@]}" install --quiet --no-index --no-deps \
    --find-links "$WHEELS" --target "$SITE" -r "$WHEELS/requirements.txt"
cd "$ROOT"
PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" "$PY" tools/gpu_check.py "$@"
