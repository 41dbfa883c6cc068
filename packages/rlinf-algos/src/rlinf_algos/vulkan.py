"""A Vulkan device for SAPIEN (ManiSkill3) on a machine without a GPU: Mesa's lavapipe.

SAPIEN needs a Vulkan device even for state observations (building a cube makes a
``RenderMaterial``), and it needs ``VK_KHR_external_semaphore_fd``, which lavapipe (Mesa's CPU
Vulkan driver) gained in Mesa 24.3. Debian 12's ``mesa-vulkan-drivers`` is 22.3 and SAPIEN
refuses it ("failed to find a rendering device"); the one in Debian's ``bookworm-backports``
(25.0) works. :func:`setup_vulkan` fetches that package into rlinf's cache without installing
anything and without touching the system's apt configuration:

1. ``apt-get update`` of a private sources list naming ``<codename>-backports`` (and the base
   suite), with private list and cache folders under the cache;
2. the newest ``mesa-vulkan-drivers`` of at least 24.3 that list offers (``apt-cache madison``),
   ``apt-get download``-ed and unpacked with ``dpkg -x`` into ``<cache>/vulkan/mesa-<version>``;
3. an ICD file ``<cache>/vulkan/lvp_icd.json`` whose ``library_path`` is the absolute path of
   the unpacked ``libvulkan_lvp.so``.

Once cached, it does nothing (no network). :func:`apply_vulkan_env` points the Vulkan loader at
that ICD (``VK_ICD_FILENAMES``) in ``os.environ``; the ManiSkill env calls it before SAPIEN is
imported, so nobody exports anything. It leaves a machine alone whose user chose a driver
(``VK_ICD_FILENAMES`` / ``VK_DRIVER_FILES`` set) or that has an NVIDIA driver. The Vulkan
loader itself (``libvulkan.so.1``, Debian's ``libvulkan1``) is the system's when installed, else
the copy SAPIEN ships.

Command line: ``python -m rlinf_algos.vulkan setup [--cache-dir DIR]`` (fetch, then check that
SAPIEN finds the device, where SAPIEN is installed) and ``python -m rlinf_algos.vulkan check``.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlinf_core.errors import RlinfError
from rlinf_core.io import atomic_write_text

__all__ = [
    "MIN_MESA",
    "SETUP_COMMAND",
    "VulkanError",
    "VulkanSetup",
    "apply_vulkan_env",
    "check_vulkan_device",
    "has_gpu_driver",
    "rlinf_cache_dir",
    "setup_vulkan",
    "system_vulkan_loader",
    "vulkan_env",
]

SETUP_COMMAND = "uv run rlinf env setup maniskill"
"""What a user runs to fetch the driver (named by every error here)."""

MIN_MESA = "24.3"
"""The first Mesa whose lavapipe SAPIEN accepts (``VK_KHR_external_semaphore_fd``)."""

DEBIAN_MIRROR = "http://deb.debian.org/debian"
_ICD_NAME = "lvp_icd.json"
_TIMEOUT_S = 300.0  # per apt-get call (an 11 MB download)


class VulkanError(RlinfError):
    """No usable Vulkan device, or the driver cannot be fetched here; the message (one line)
    says what to run or install."""

    exit_code = 2


@dataclass(frozen=True)
class VulkanSetup:
    """What :func:`setup_vulkan` left in the cache."""

    icd_file: Path
    """the ICD json to name in ``VK_ICD_FILENAMES``"""
    library: Path
    """the unpacked ``libvulkan_lvp.so``"""
    version: str
    """the Debian version of ``mesa-vulkan-drivers`` it came from"""
    fetched: bool
    """whether this call downloaded it (``False``: it was cached)"""


def rlinf_cache_dir() -> Path:
    """rlinf's cache folder: ``$RLINF_CACHE_DIR``, else ``$XDG_CACHE_HOME/rlinf``, else
    ``~/.cache/rlinf`` (not created here)."""
    if os.environ.get("RLINF_CACHE_DIR"):
        return Path(os.environ["RLINF_CACHE_DIR"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "rlinf"
    return Path.home() / ".cache" / "rlinf"


def _vulkan_dir(cache_dir: str | os.PathLike[str] | None) -> Path:
    return Path(cache_dir if cache_dir is not None else rlinf_cache_dir()) / "vulkan"


def _cached(cache_dir: str | os.PathLike[str] | None) -> VulkanSetup | None:
    """The cached driver, when its ICD file and the library it names both exist."""
    icd = _vulkan_dir(cache_dir) / _ICD_NAME
    try:
        data = json.loads(icd.read_text())
        library = Path(data["ICD"]["library_path"])
        version = str(data.get("rlinf_mesa_version", "?"))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not library.is_file():
        return None
    return VulkanSetup(icd_file=icd, library=library, version=version, fetched=False)


def system_vulkan_loader() -> str | None:
    """The path of the system's Vulkan loader ``libvulkan.so.1`` (Debian's ``libvulkan1``), or
    ``None`` (SAPIEN then uses the loader its wheel ships)."""
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    for line in out.splitlines():
        if line.strip().startswith("libvulkan.so.1 "):
            return line.rsplit("=>", 1)[-1].strip()
    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"):
        if os.path.isfile(os.path.join(d, "libvulkan.so.1")):
            return os.path.join(d, "libvulkan.so.1")
    return None


def has_gpu_driver() -> bool:
    """Whether an NVIDIA driver is installed (``nvidia-smi`` on the PATH, or an ``nvidia*`` ICD
    json): then the cached lavapipe is not forced on the Vulkan loader. (Mesa's own ICDs, the
    system's older lavapipe, radv or anv, do not count; a user of another GPU driver names it in
    ``VK_ICD_FILENAMES``.)"""
    if shutil.which("nvidia-smi"):
        return True
    dirs = ["/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d"]
    return any(glob.glob(os.path.join(d, "nvidia*.json")) for d in dirs)


def vulkan_env(cache_dir: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """The environment variables that make the Vulkan loader use the cached lavapipe:
    ``{"VK_ICD_FILENAMES": <icd json>}``; ``{}`` when it is not cached, when the user named a
    driver (``VK_ICD_FILENAMES`` or ``VK_DRIVER_FILES`` set) or when a GPU driver is installed."""
    if os.environ.get("VK_ICD_FILENAMES") or os.environ.get("VK_DRIVER_FILES"):
        return {}
    cached = _cached(cache_dir)
    if cached is None or has_gpu_driver():
        return {}
    return {"VK_ICD_FILENAMES": str(cached.icd_file)}


def apply_vulkan_env(cache_dir: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """Set :func:`vulkan_env` in ``os.environ`` (call it before SAPIEN is imported: its Vulkan
    instance reads them once); returns what was set."""
    env = vulkan_env(cache_dir)
    os.environ.update(env)
    return env


def check_vulkan_device() -> str:
    """The name of the Vulkan device SAPIEN renders with; :class:`VulkanError` (one line, naming
    :data:`SETUP_COMMAND`) when it finds none. Imports SAPIEN: apply the env first."""
    import warnings

    with warnings.catch_warnings():  # "Failed to find system libvulkan": its own copy is fine
        warnings.simplefilter("ignore")
        import sapien.render
    try:
        summary = sapien.render.get_device_summary()
    except RuntimeError as err:
        icd = os.environ.get("VK_ICD_FILENAMES") or os.environ.get("VK_DRIVER_FILES")
        ours = _cached(None)
        if not icd:
            named = "no driver named by VK_ICD_FILENAMES"
        elif ours is not None and icd == str(ours.icd_file):
            named = f"VK_ICD_FILENAMES={icd}"
        else:
            named = f"VK_ICD_FILENAMES={icd}, set outside rlinf: unset it to use rlinf's lavapipe"
        raise VulkanError(
            f"SAPIEN (ManiSkill) finds no usable Vulkan device ({str(err).strip()}; {named}); on a "
            f"CPU machine run `{SETUP_COMMAND}` (Mesa >= {MIN_MESA} lavapipe into "
            f"{_vulkan_dir(None)}), or install a GPU's Vulkan driver"
        ) from None
    first = next((ln for ln in summary.splitlines() if ln.strip()), "").strip()
    return first.removeprefix("GPU:").strip() or "a Vulkan device"


# -- fetching the driver --------------------------------------------------------------------------


def _run(cmd: list[str], what: str, timeout: float = _TIMEOUT_S) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise VulkanError(f"{what} did not finish within {timeout:.0f} s ({' '.join(cmd[:2])} ...)") from None
    if done.returncode != 0:
        tail = (done.stderr.strip() or done.stdout.strip()).splitlines()
        why = tail[-1][:200] if tail else f"exit {done.returncode}"
        raise VulkanError(f"{what} failed: {why}")
    return done.stdout


def _debian_codename() -> str:
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        text = ""
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    ids = {fields.get("ID", "").strip('"'), *fields.get("ID_LIKE", "").strip('"').split()}
    codename = fields.get("VERSION_CODENAME", "").strip('"')
    if "debian" not in ids or not codename or fields.get("ID", "").strip('"') != "debian":
        raise VulkanError(
            f"fetching lavapipe is automated on Debian only (this is {fields.get('PRETTY_NAME', 'not Debian')}"
            f"); install Mesa >= {MIN_MESA}'s Vulkan driver (lavapipe, e.g. mesa-vulkan-drivers) or a GPU's, "
            "or set VK_ICD_FILENAMES to its ICD json"
        )
    return codename


def _newer_or_equal(version: str, minimum: str) -> bool:
    done = subprocess.run(
        ["dpkg", "--compare-versions", version, "ge", minimum], capture_output=True, timeout=10
    )
    return done.returncode == 0


def setup_vulkan(
    cache_dir: str | os.PathLike[str] | None = None, *, mirror: str = DEBIAN_MIRROR, log: Any = None
) -> VulkanSetup:
    """Fetch Mesa's lavapipe into ``<cache_dir>/vulkan`` (default :func:`rlinf_cache_dir`) as
    the module docstring says, unless it is there already (then no network). ``log``: a
    callable taking one line of progress (``None``: quiet). Raises :class:`VulkanError`."""
    say = log or (lambda _line: None)
    cached = _cached(cache_dir)
    if cached is not None:
        return cached
    if not (shutil.which("apt-get") and shutil.which("apt-cache") and shutil.which("dpkg")):
        raise VulkanError(
            "apt-get/dpkg not found: fetching lavapipe is automated on Debian only; install Mesa >= "
            f"{MIN_MESA}'s Vulkan driver (lavapipe) or a GPU's, or set VK_ICD_FILENAMES to its ICD json"
        )
    codename = _debian_codename()
    root = _vulkan_dir(cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=".fetch-") as tmp:
        work = Path(tmp)
        sources = work / "sources.list"
        sources.write_text(f"deb {mirror} {codename} main\ndeb {mirror} {codename}-backports main\n")
        for d in ("lists/partial", "cache/archives/partial", "deb"):
            (work / d).mkdir(parents=True)
        apt_opts = [
            "-o", f"Dir::Etc::sourcelist={sources}",
            "-o", "Dir::Etc::sourceparts=-",
            "-o", f"Dir::State::Lists={work / 'lists'}",
            "-o", f"Dir::Cache={work / 'cache'}",
            "-o", "APT::Sandbox::User=root" if os.geteuid() == 0 else "APT::Sandbox::User=_apt",
        ]  # fmt: skip
        say(f"apt-get update of {codename} and {codename}-backports (private lists)")
        _run(["apt-get", *apt_opts, "update"], f"apt-get update of {mirror} {codename}-backports")
        out = _run(["apt-cache", *apt_opts, "madison", "mesa-vulkan-drivers"], "apt-cache madison")
        versions = [line.split("|")[1].strip() for line in out.splitlines() if line.count("|") >= 2]
        good = [v for v in versions if _newer_or_equal(v, MIN_MESA)]
        if not good:
            raise VulkanError(
                f"Debian {codename} (with backports) offers mesa-vulkan-drivers {', '.join(versions) or 'in no version'}"
                f"; SAPIEN needs Mesa >= {MIN_MESA}: install a newer lavapipe or a GPU's Vulkan driver"
            )
        best = good[0]
        for v in good[1:]:
            if _newer_or_equal(v, best):
                best = v
        say(f"apt-get download mesa-vulkan-drivers={best}")
        subprocess_cwd = work / "deb"
        try:
            done = subprocess.run(
                ["apt-get", *apt_opts, "download", f"mesa-vulkan-drivers={best}"],
                capture_output=True, text=True, timeout=_TIMEOUT_S, cwd=subprocess_cwd,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise VulkanError(
                f"apt-get download mesa-vulkan-drivers={best} took over {_TIMEOUT_S:.0f} s"
            ) from None
        debs = sorted(subprocess_cwd.glob("mesa-vulkan-drivers_*.deb"))
        if done.returncode != 0 or not debs:
            tail = (done.stderr.strip() or "no .deb written").splitlines()[-1][:200]
            raise VulkanError(f"apt-get download mesa-vulkan-drivers={best} failed: {tail}")
        unpacked = work / "root"
        _run(["dpkg", "-x", str(debs[0]), str(unpacked)], f"dpkg -x {debs[0].name}")
        libs = sorted(unpacked.glob("usr/lib/*/libvulkan_lvp.so"))
        if not libs:
            raise VulkanError(f"{debs[0].name} holds no usr/lib/*/libvulkan_lvp.so")
        depends = _run(["dpkg-deb", "-f", str(debs[0]), "Depends"], "dpkg-deb -f").strip()
        target = root / f"mesa-{best.replace('~', '_').replace(':', '_')}"
        if target.exists():
            shutil.rmtree(target)
        os.replace(unpacked, target)
        library = target / libs[0].relative_to(unpacked)
    _check_libraries(library, depends)
    icd = root / _ICD_NAME
    template = {"file_format_version": "1.0.0", "ICD": {"api_version": "1.3.0"}}
    shipped = sorted(target.glob("usr/share/vulkan/icd.d/lvp_icd*.json"))
    if shipped:
        template = json.loads(shipped[0].read_text())
    template["ICD"]["library_path"] = str(library)
    template["rlinf_mesa_version"] = best
    atomic_write_text(icd, json.dumps(template, indent=2) + "\n", perms=0o644)
    say(f"lavapipe of Mesa {best} in {target}; ICD {icd}")
    return VulkanSetup(icd_file=icd, library=library, version=best, fetched=True)


def _check_libraries(library: Path, depends: str) -> None:
    """:class:`VulkanError` when the unpacked driver needs shared libraries this system lacks
    (``ldd``'s "not found"), naming the package's own dependency list."""
    if not shutil.which("ldd"):
        return
    out = subprocess.run(["ldd", str(library)], capture_output=True, text=True, timeout=30).stdout
    missing = [line.split("=>")[0].strip() for line in out.splitlines() if "not found" in line]
    if missing:
        packages = [p.split("(")[0].strip() for p in depends.split(",")]
        packages = [p for p in packages if p and p != "libvulkan1"]
        raise VulkanError(
            f"the unpacked lavapipe needs libraries missing here ({', '.join(missing)}); install its "
            f"dependencies: apt-get install {' '.join(packages)}"
        )


# -- command line ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """``python -m rlinf_algos.vulkan {setup,check} [--cache-dir DIR]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m rlinf_algos.vulkan", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["setup", "check"])
    parser.add_argument("--cache-dir", default=None, help="default: $RLINF_CACHE_DIR or ~/.cache/rlinf")
    args = parser.parse_args(argv)
    try:
        if args.command == "setup":
            setup = setup_vulkan(args.cache_dir, log=lambda line: print(f"vulkan: {line}", flush=True))
            if setup.fetched is False:
                print(f"vulkan: lavapipe of Mesa {setup.version} is cached ({setup.icd_file})")
        if args.command == "check" and not _sapien_installed():
            raise VulkanError("SAPIEN is not installed here: install rlinf-algos' maniskill extra")
        if _sapien_installed():
            apply_vulkan_env(args.cache_dir)  # SAPIEN is not imported yet in this process
            device = check_vulkan_device()
            loader = system_vulkan_loader() or (
                "SAPIEN's own copy (no system libvulkan1; `apt-get install libvulkan1` for the system's)"
            )
            print(f"vulkan: SAPIEN renders with {device}; loader {loader}")
    except VulkanError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    return 0


def _sapien_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("sapien") is not None


if __name__ == "__main__":
    sys.exit(main())
