"""Ray token authentication as rlinf uses it: private token files, one auth mode, fast refusals.

- Every token file rlinf creates is written with mode 0600; every one it uses (``rlinf node start``,
  the embedded Ray, a driver attaching) is checked first: a file readable or writable by other
  users is set to 0600 with one line on stderr, and one that cannot be fixed (another user's, a
  failed ``chmod``, not a regular file) is refused. Ray itself writes ``~/.ray/auth_token`` with
  the process umask (0644 as a rule), so rlinf creates the embedded cluster's token itself.
- :func:`auth_mode` reads ``RAY_AUTH_MODE`` (``token`` or ``disabled``; unset: ``None``).
- :func:`check_gcs_auth` asks the head's GCS one cheap question before ``ray.init``: an
  authentication refusal is not transient, so it fails at once with :class:`AuthRefused` instead
  of being retried (``ray.init`` retries it for about 20 s, printing a C++ warning per second).

The token itself is never read here, except to check that a file is not empty.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Mapping
from pathlib import Path

from rlinf_core.errors import ConfigError, SchedulerError
from rlinf_core.io import atomic_write_text

__all__ = [
    "AUTH_MODE_ENV",
    "AuthRefused",
    "auth_mode",
    "check_gcs_auth",
    "create_token_file",
    "default_token_path",
    "prepare_local_token",
    "secure_token_file",
]

AUTH_MODE_ENV = "RAY_AUTH_MODE"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
TOKEN_ENV = "RAY_AUTH_TOKEN"
AUTH_MODES = ("token", "disabled")


class AuthRefused(SchedulerError):
    """The Ray head refused this process's credentials (retrying cannot help)."""


def default_token_path(env: Mapping[str, str] | None = None) -> Path:
    """Ray's token file: ``RAY_AUTH_TOKEN_PATH`` if set, else ``~/.ray/auth_token``."""
    env = os.environ if env is None else env
    if env.get(TOKEN_PATH_ENV):
        return Path(env[TOKEN_PATH_ENV]).expanduser()
    return Path.home() / ".ray" / "auth_token"


def auth_mode(env: Mapping[str, str] | None = None) -> str | None:
    """``RAY_AUTH_MODE`` normalized (``token`` or ``disabled``), ``None`` when unset.

    Raises :class:`ConfigError` for any other value."""
    env = os.environ if env is None else env
    raw = env.get(AUTH_MODE_ENV)
    if raw is None:
        return None
    mode = raw.strip().lower()
    if mode not in AUTH_MODES:
        raise ConfigError(
            f"RAY_AUTH_MODE={raw!r} in the environment is not an auth mode rlinf supports: set it to token "
            "or disabled, or unset it",
            AUTH_MODE_ENV,
        )
    return mode


def secure_token_file(path: str | os.PathLike[str], where: str = TOKEN_PATH_ENV) -> Path:
    """Check that the token file ``path`` is private to this user before it is used.

    A file with any group or other permission bit is set to 0600, with one line on stderr. Raises
    :class:`ConfigError` (at ``where``) when it is not a regular file, is empty, or is too open and
    cannot be fixed (another user's file, a failed ``chmod``)."""
    path = Path(path)
    try:
        st = path.stat()
    except OSError as err:
        raise ConfigError(
            f"cannot read the Ray auth token file {path}: {err.strerror or err}", where
        ) from None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"the Ray auth token file {path} is not a regular file", where)
    if st.st_size == 0:
        raise ConfigError(f"the Ray auth token file {path} is empty: copy the head's token file here", where)
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        fix = f"run `chmod 600 {path}` as its owner, or use a token file of your own"
        if st.st_uid != os.geteuid():
            raise ConfigError(
                f"the Ray auth token file {path} can be read by other users (mode {mode:04o}) and belongs to "
                f"uid {st.st_uid}, not to you (uid {os.geteuid()}), so rlinf will not change it: {fix}",
                where,
            )
        try:
            os.chmod(path, 0o600)
        except OSError as err:
            raise ConfigError(
                f"the Ray auth token file {path} can be read by other users (mode {mode:04o}) and could not "
                f"be made private ({err.strerror or err}): {fix}",
                where,
            ) from None
        sys.stderr.write(
            f"rlinf: the Ray auth token file {path} was open to other users (mode {mode:04o}); "
            "set it to 0600\n"
        )
    return path


def prepare_local_token(env: Mapping[str, str] | None = None) -> Path | None:
    """For a Ray that this process starts with token authentication (the embedded one): the token
    file Ray will read, created with mode 0600 when missing (Ray would write it world-readable),
    else checked with :func:`secure_token_file`. ``None`` when authentication is disabled or the
    token comes from ``RAY_AUTH_TOKEN``."""
    env = os.environ if env is None else env
    if auth_mode(env) == "disabled" or env.get(TOKEN_ENV):
        return None
    path = default_token_path(env)
    if not path.is_absolute():
        path = path.resolve()
    if not path.exists() and create_token_file(path):
        return path
    return secure_token_file(path)


def create_token_file(path: Path) -> bool:
    """Write a new random token to ``path`` with mode 0600 unless the file exists; ``False`` when
    it does (another process made it first: its token is the one to use, never replaced)."""
    import secrets

    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = atomic_write_text(
        path.with_name(f".{path.name}.{os.getpid()}.new"), secrets.token_hex(32), perms=0o600
    )
    try:
        os.link(tmp, path)  # atomic and exclusive: a concurrent start keeps the first token
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    return True


def check_gcs_auth(address: str, timeout: float = 5.0) -> None:
    """Ask the GCS at ``address`` for its cluster id with this process's credentials; raise
    :class:`AuthRefused` (one line, the mode and token source named, never the token) when it
    answers "unauthenticated". Any other outcome (an answer, a timeout, an unreachable head) is
    left to ``ray.init``."""
    import grpc
    from ray._private.grpc_utils import init_grpc_channel
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    channel = init_grpc_channel(address)
    try:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=timeout)
    except grpc.RpcError as err:
        code = err.code() if callable(getattr(err, "code", None)) else None
        if code == grpc.StatusCode.UNAUTHENTICATED:
            raise AuthRefused(auth_refused_message(address)) from None
    finally:
        channel.close()


def auth_refused_message(address: str, env: Mapping[str, str] | None = None) -> str:
    """Why the head at ``address`` refused this process, and what to do (never the token)."""
    env = os.environ if env is None else env
    mode = (env.get(AUTH_MODE_ENV) or "").strip().lower()
    if mode != "token":
        why = (
            f"RAY_AUTH_MODE is {env[AUTH_MODE_ENV]!r} here"
            if env.get(AUTH_MODE_ENV)
            else "this process sends no token"
        )
        what = (
            "set RAY_AUTH_MODE=token and make the head's token file available here (RAY_AUTH_TOKEN_PATH=FILE "
            "or ~/.ray/auth_token)"
        )
        return (
            f"the Ray head at {address} refused this process: it uses token authentication and {why}; {what}"
        )
    source = "RAY_AUTH_TOKEN" if env.get(TOKEN_ENV) else f"the token file {default_token_path(env)}"
    return (
        f"the Ray head at {address} refused this process's token ({source}): it is not the head's token; "
        "copy the head's token file here (RAY_AUTH_TOKEN_PATH=FILE or ~/.ray/auth_token)"
    )
