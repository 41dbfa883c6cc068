"""The settings of one EasyTier node, validated, and their renderings: the dict the in-process core
takes, the TOML file ``easytier-core --config-file`` takes, and a systemd unit.

The network secret is never a field of :class:`EasyTierConfig`: the config only says where the
secret comes from (``secret_file`` or ``secret_env``); :func:`load_secret` reads it when a node is
started, and renderings that may be printed leave it out.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import stat
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rlinf_core.errors import ConfigError, NetworkError

__all__ = [
    "DEFAULT_LISTEN_PORT",
    "PEER_SCHEMES",
    "EasyTierConfig",
    "default_instance_name",
    "load_secret",
    "parse_peer_url",
    "redact",
    "to_toml",
]

DEFAULT_LISTEN_PORT = 11010
PEER_SCHEMES = ("tcp", "udp", "ws", "wss", "quic", "wg", "faketcp")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_IFNAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")


def default_instance_name() -> str:
    """The default ``--name``: this machine's host name, reduced to the characters names allow."""
    host = socket.gethostname().split(".")[0] or "rlinf"
    clean = re.sub(r"[^A-Za-z0-9._-]", "-", host).strip(".-_") or "rlinf"
    return clean[:63]


def parse_peer_url(url: str, *, where: str = "--peer") -> str:
    """Check a peer URL such as ``tcp://203.0.113.7:11010`` and return it normalised.

    Raises :class:`ValueError` (turned into a config/usage error by callers) naming what is wrong:
    a missing or unknown scheme, a missing host, or a missing or out-of-range port.
    """
    text = url.strip()
    schemes = ", ".join(f"{s}://" for s in PEER_SCHEMES)
    if "://" not in text:
        raise ValueError(f"{where} {url!r} is not a URL; write it as tcp://HOST:PORT (schemes: {schemes})")
    parts = urlsplit(text)
    if parts.scheme.lower() not in PEER_SCHEMES:
        raise ValueError(f"{where} {url!r} has scheme {parts.scheme!r}; valid schemes: {schemes}")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{where} {url!r} has an invalid port; use a number from 1 to 65535") from None
    if not parts.hostname:
        raise ValueError(f"{where} {url!r} has no host; write it as {parts.scheme}://HOST:PORT")
    if port is None or not 1 <= port <= 65535:
        raise ValueError(
            f"{where} {url!r} has no port; write it as {parts.scheme}://{parts.hostname}:{DEFAULT_LISTEN_PORT}"
        )
    if parts.path not in ("", "/") and parts.scheme.lower() not in ("ws", "wss"):
        raise ValueError(f"{where} {url!r} has a path {parts.path!r}; only ws:// and wss:// URLs take one")
    return f"{parts.scheme.lower()}://{parts.netloc}{parts.path if parts.path not in ('', '/') else ''}"


def _listener_url(value: str | int) -> str:
    text = str(value).strip()
    if text.isdigit():
        port = int(text)
        if not 1 <= port <= 65535:
            raise ValueError(f"listen port {text} is out of range; use a number from 1 to 65535")
        return f"tcp://0.0.0.0:{port}"
    return parse_peer_url(text, where="--listen")


class EasyTierConfig(BaseModel):
    """One EasyTier node (``rlinf net up`` options; the ``network`` section a YAML may carry).

    ``ipv4`` is this node's fixed overlay address (``10.10.0.11`` or ``10.10.0.11/24``; the
    prefix defaults to /24). ``listen`` holds ports or listener URLs, ``peers`` the URLs to dial
    (a node needs at least one, normally the bootstrap's). The secret comes from exactly one of
    ``secret_file`` and ``secret_env``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(
        default_factory=default_instance_name,
        description="Instance name (`--name`; default: this host's name): 1-63 letters, digits, '.', '_' "
        "or '-'. Several instances can run on one host; `status`, `verify` and `down` pick one by name.",
    )
    role: Literal["bootstrap", "node"] = Field(
        default="node",
        description="`bootstrap`: the node with a public address that listens (on 11010 unless `listen` "
        "says otherwise); `node`: dials `peers` (`--role`).",
    )
    network_name: str = Field(
        description="Overlay network name, the same on every node: 1-64 characters without spaces "
        "(`--network-name`)."
    )
    secret_file: Path | None = Field(
        default=None,
        description="File holding the shared network secret, readable by its owner only (`--secret-file`). "
        "Exactly one of `secret_file` and `secret_env`.",
    )
    secret_env: str | None = Field(
        default=None,
        description="Name of the environment variable holding the secret (`--secret-env`), never the "
        "secret itself.",
    )
    ipv4: str = Field(
        description="This node's fixed overlay address, unique in the network: `10.10.0.11` or "
        "`10.10.0.11/24` (prefix /8 to /30, default /24) (`--ipv4`)."
    )
    listen: list[str] = Field(
        default_factory=list,
        description="Ports or listener URLs (`--listen`, repeatable): `11010` means `tcp://0.0.0.0:11010`. "
        "A bootstrap with none listens on 11010.",
    )
    peers: list[str] = Field(
        default_factory=list,
        description="URLs to dial (`--peer`, repeatable), e.g. `tcp://203.0.113.7:11010`; schemes tcp, "
        "udp, ws, wss, quic, wg, faketcp. A `node` needs at least one, normally the bootstrap's.",
    )
    hostname: str | None = Field(
        default=None, description="Name shown to peers, 1-32 characters (default: the instance name)."
    )
    dev_name: str = Field(default="et0", description="TUN device name, 1-15 characters (`--dev-name`).")
    private_mode: bool = Field(
        default=True,
        description="Refuse nodes of other networks (`--private-mode/--no-private-mode`).",
    )
    no_tun: bool = Field(
        default=False,
        description="Run without a TUN device (no root needed): the node relays, but this host cannot open "
        "connections to overlay addresses (`--no-tun`).",
    )
    public_stun: bool = Field(
        default=False,
        description="Use EasyTier's public STUN servers (`--public-stun`); off, no lookups leave the node.",
    )
    upnp: bool = Field(default=False, description="Map ports with UPnP (`--upnp`).")
    mtu: int | None = Field(
        default=None, ge=576, le=9000, description="TUN MTU (`--mtu`; default: EasyTier's)."
    )
    backend: Literal["pyo3", "easytier-core"] = Field(
        default="pyo3",
        description="`pyo3`: the EasyTier core in-process (easytier-pyo3); `easytier-core`: the binary on "
        "PATH, configured by a 0600 TOML file (`--backend`).",
    )
    ready_timeout: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="Seconds `up` waits for the first peer (a bootstrap: for its listeners) (`--timeout`).",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(
                f"instance name {v!r} is invalid; use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"
            )
        return v

    @field_validator("network_name")
    @classmethod
    def _network_name(cls, v: str) -> str:
        if not v.strip() or len(v) > 64 or any(ch.isspace() for ch in v):
            raise ValueError("network name must be 1-64 characters without spaces")
        return v

    @field_validator("secret_env")
    @classmethod
    def _secret_env(cls, v: str | None) -> str | None:
        if v is not None and not _ENV_RE.match(v):
            raise ValueError(
                f"{v!r} is not an environment variable name; give the NAME of the variable that holds the secret, not the secret"
            )
        return v

    @field_validator("ipv4")
    @classmethod
    def _ipv4(cls, v: str) -> str:
        text = v.strip()
        try:
            iface = ipaddress.IPv4Interface(text if "/" in text else f"{text}/24")
        except (ipaddress.AddressValueError, ipaddress.NetmaskValueError, ValueError):
            raise ValueError(
                f"{v!r} is not an IPv4 address; give this node's overlay address such as 10.10.0.11 or 10.10.0.11/24"
            ) from None
        ip = iface.ip
        if iface.network.prefixlen > 30 and "/" in text:
            raise ValueError(
                f"prefix /{iface.network.prefixlen} of {v!r} is too narrow; use /8 to /30 (default /24)"
            )
        if ip.is_loopback or ip.is_multicast or ip.is_unspecified or ip.is_link_local or ip.is_reserved:
            raise ValueError(f"{v!r} cannot be an overlay address; use a private address such as 10.10.0.11")
        if ip in (iface.network.network_address, iface.network.broadcast_address):
            raise ValueError(
                f"{v!r} is the network or broadcast address of {iface.network}; pick a host address"
            )
        return str(iface)

    @field_validator("listen", mode="before")
    @classmethod
    def _listen(cls, v: Any) -> list[str]:
        items = [v] if isinstance(v, str | int) else list(v or [])
        return [_listener_url(x) for x in items]

    @field_validator("peers", mode="before")
    @classmethod
    def _peers(cls, v: Any) -> list[str]:
        items = [v] if isinstance(v, str) else list(v or [])
        return [parse_peer_url(str(x)) for x in items]

    @field_validator("hostname")
    @classmethod
    def _hostname(cls, v: str | None) -> str | None:
        if v is not None and (not v.strip() or len(v) > 32 or any(ord(c) < 32 for c in v)):
            raise ValueError("hostname must be 1-32 printable characters")
        return v

    @field_validator("dev_name")
    @classmethod
    def _dev_name(cls, v: str) -> str:
        if not _IFNAME_RE.match(v):
            raise ValueError(
                f"device name {v!r} is invalid; use 1-15 letters, digits, '_', '.' or '-' (e.g. et0)"
            )
        return v

    @model_validator(mode="after")
    def _checks(self) -> EasyTierConfig:
        if (self.secret_file is None) == (self.secret_env is None):
            raise ValueError(
                "give the network secret with exactly one of --secret-file FILE or --secret-env VAR "
                "(never on the command line)"
            )
        if self.role == "node" and not self.peers:
            raise ValueError(
                "a node needs at least one --peer, e.g. --peer tcp://BOOTSTRAP_IP:11010 (the bootstrap's listener)"
            )
        if self.role == "bootstrap" and not self.listen:
            object.__setattr__(self, "listen", [f"tcp://0.0.0.0:{DEFAULT_LISTEN_PORT}"])
        return self

    # -- derived -----------------------------------------------------------------------------------
    @property
    def address(self) -> str:
        """The overlay IPv4 without prefix (``10.10.0.11``)."""
        return str(ipaddress.IPv4Interface(self.ipv4).ip)

    @property
    def device(self) -> str | None:
        """The TUN device name, or ``None`` with ``no_tun``."""
        return None if self.no_tun else self.dev_name

    @property
    def effective_hostname(self) -> str:
        return self.hostname or self.name[:32]

    def secret_source(self) -> str:
        """Where the secret comes from, for messages (never the secret itself)."""
        return f"--secret-file {self.secret_file}" if self.secret_file else f"--secret-env {self.secret_env}"

    def core_config(self, secret: str | None) -> dict[str, Any]:
        """The node configuration in easytier's config-file layout (same keys as ``easytier-core``
        TOML). ``secret=None`` leaves ``network_secret`` out (for printing)."""
        flags: dict[str, Any] = {
            "private_mode": self.private_mode,
            "no_tun": self.no_tun,
            "disable_upnp": not self.upnp,
        }
        if self.no_tun:
            flags["bind_device"] = False  # tunnel sockets cannot bind to a TUN address that does not exist
        else:
            flags["dev_name"] = self.dev_name
        if self.mtu is not None:
            flags["mtu"] = self.mtu
        identity: dict[str, Any] = {"network_name": self.network_name}
        if secret is not None:
            identity["network_secret"] = secret
        cfg: dict[str, Any] = {
            "instance_name": self.name,
            "hostname": self.effective_hostname,
            "ipv4": self.ipv4,
            "dhcp": False,
            "network_identity": identity,
            "listeners": list(self.listen),
            "peer": [{"uri": p} for p in self.peers],
            "flags": flags,
        }
        if not self.public_stun:
            # Empty lists replace easytier's built-in public STUN servers: no lookups leave the node.
            cfg.update({"stun_servers": [], "tcp_stun_servers": [], "stun_servers_v6": []})
        return cfg

    @classmethod
    def from_mapping(cls, data: Any, prefix: str = "") -> EasyTierConfig:
        """Validate a mapping (a YAML section); errors are :class:`ConfigError` with YAML paths."""
        from rlinf_core.config import validate_model

        return validate_model(cls, data, prefix)


def load_secret(cfg: EasyTierConfig) -> str:
    """Read the network secret from the file or environment variable the config names.

    Raises :class:`ConfigError` naming the option when the source is missing, unreadable or
    empty. The error never contains the secret.
    """
    if cfg.secret_file is not None:
        path = Path(cfg.secret_file).expanduser()
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(
                f"--secret-file {path}: no such file; write the shared secret into it (mode 600)"
            ) from None
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError(
                f"--secret-file {path}: cannot read it: {getattr(err, 'strerror', None) or err}"
            ) from None
        secret = raw.strip()
        if not secret:
            raise ConfigError(f"--secret-file {path} is empty; write the shared network secret into it")
        return secret
    value = os.environ.get(cfg.secret_env or "")
    if value is None:
        raise ConfigError(f"--secret-env {cfg.secret_env}: the environment variable is not set")
    if not value.strip():
        raise ConfigError(f"--secret-env {cfg.secret_env}: the environment variable is empty")
    return value.strip()


def secret_file_is_private(path: Path) -> bool:
    """Whether only the owner can read ``path`` (group/other bits clear)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return True
    return not mode & (stat.S_IRWXG | stat.S_IRWXO)


def redact(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` replaced (for logs and error messages)."""
    if secret and secret in text:
        return text.replace(secret, "<redacted>")
    return text


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        escaped = "".join(ch if ord(ch) >= 32 else f"\\u{ord(ch):04x}" for ch in escaped)
        return f'"{escaped}"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise NetworkError(f"cannot render {type(value).__name__} as TOML")


def to_toml(cfg: dict[str, Any], header: str = "") -> str:
    """Render a :meth:`EasyTierConfig.core_config` dict as TOML (tables and arrays of tables)."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    tables: list[tuple[str, dict[str, Any]]] = []
    arrays: list[tuple[str, list[dict[str, Any]]]] = []
    for key, value in cfg.items():
        if isinstance(value, dict):
            tables.append((key, value))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            arrays.append((key, value))
        elif isinstance(value, list) and not value and key == "peer":
            continue
        else:
            lines.append(f"{key} = {_toml_value(value)}")
    for key, table in tables:
        lines += ["", f"[{key}]"] + [f"{k} = {_toml_value(v)}" for k, v in table.items()]
    for key, items in arrays:
        for item in items:
            lines += ["", f"[[{key}]]"] + [f"{k} = {_toml_value(v)}" for k, v in item.items()]
    return "\n".join(lines) + "\n"
