"""The daemon's host as callers may reach it: every path a request names is confined to a root the operator set.

A token holder is a tenant, not a user of the daemon's host. Paths in requests (datasets, base models,
model directories, bundles, export targets, backups, SSH keys) are confined: made absolute against the
root (a relative name is a name inside it), `..` normalised away, symlinks resolved and refused when
they leave the root, and never inside the home's own state (the ledger, tokens, runs, blobs). A path
outside every root is refused before the filesystem is touched, so the answer says nothing about what
exists there. Remote callers send data through the blob upload instead (`PUT /v1/blobs`).

- read (datasets, models, bundles): `$BASHGYM_HOME/data`, `$BASHGYM_HOME/exports`, BASHGYM_DATA_ROOTS;
- write (model export bundles): `$BASHGYM_HOME/exports`, BASHGYM_EXPORT_ROOTS;
- ledger backups (admin only): BASHGYM_BACKUP_DIR, default `$BASHGYM_HOME/backups`;
- SSH keys and known_hosts files: BASHGYM_SSH_KEYS_DIR, default `$BASHGYM_HOME/keys`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ipaddress
import os
import socket
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bashgym.client.errors import Forbidden, InvalidInput
from bashgym.daemon.settings import Settings

# Folders of the home that callers may name: the operator's inbox of data, and the bundles the daemon exported
# (under exports/<workspace>/, each workspace its own).
PUBLIC_HOME_DIRS = ("data", "exports")
# The home's own state: created 0700, every file in it 0600.
HOME_DIR_MODE = 0o700


def exports_dir(settings: Settings, workspace: str) -> Path:
    """Where the home keeps the bundles exported in `workspace` (a workspace id is an identifier: no `/`)."""
    return settings.home / "exports" / workspace


class PathRefused(Forbidden):
    code = "path_refused"


@dataclass(frozen=True)
class Root:
    """One directory callers may name paths in; `lexical` as configured, `real` with its symlinks resolved."""

    lexical: Path
    real: Path

    @classmethod
    def of(cls, path: Path) -> Root:
        lexical = Path(os.path.normpath(path.expanduser().absolute()))
        return cls(lexical, lexical.resolve())

    def holds(self, path: Path) -> bool:
        return path == self.lexical or self.lexical in path.parents or path == self.real or self.real in path.parents


class HostPaths:
    """Where on its host the daemon reads and writes for callers of `workspace`; each method confines one kind of
    path. The home's `exports/` holds one folder per workspace: a bundle a tenant exported is readable in its own
    workspace only (any of its projects may import it), never in another's."""

    def __init__(self, settings: Settings, *, workspace: str | None = None) -> None:
        self.home = Root.of(settings.home)
        exports = [exports_dir(settings, workspace)] if workspace else []
        self.read_roots = [Root.of(p) for p in [settings.home / "data", *exports, *settings.data_roots]]
        self.import_roots = [Root.of(p) for p in [*exports, settings.home / "data", *settings.data_roots]]
        self.export_roots = [Root.of(p) for p in [*exports, *settings.export_roots]]
        self.backup_root = Root.of(settings.backup_dir or settings.home / "backups")
        self.keys_root = Root.of(settings.ssh_keys_dir or settings.home / "keys")
        self._public = [Root.of(settings.home / name) for name in PUBLIC_HOME_DIRS]

    def readable(self, text: str, *, field: str) -> Path:
        """A file or directory a caller names for the daemon to read (it may not exist: the caller finds out)."""
        return self._confine(text, self.read_roots, field=field, setting="BASHGYM_DATA_ROOTS")

    def importable(self, text: str, *, field: str) -> Path:
        """A bundle to import: readable as any data, and a bare name is a bundle this workspace exported."""
        return self._confine(text, self.import_roots, field=field, setting="BASHGYM_DATA_ROOTS")

    def export_target(self, text: str, *, field: str) -> Path:
        if not self.export_roots:
            raise InvalidInput("An export needs the workspace it is made for.")  # a programming error, said plainly
        return self._confine(text, self.export_roots, field=field, setting="BASHGYM_EXPORT_ROOTS")

    def backup_target(self, text: str) -> Path:
        target = self._confine(text, [self.backup_root], field="to", setting="BASHGYM_BACKUP_DIR", inside_home=True)
        if target == self.backup_root.real:
            raise InvalidInput("Name a backup file, not the backup directory itself.", hint="e.g. ledger-2026-12-04")
        return target

    def key_file(self, text: str, *, field: str) -> Path:
        return self._confine(text, [self.keys_root], field=field, setting="BASHGYM_SSH_KEYS_DIR", inside_home=True)

    def _confine(self, text: str, roots: list[Root], *, field: str, setting: str, inside_home: bool = False) -> Path:
        if not text or "\0" in text:
            raise InvalidInput(f"`{field}` is empty or holds a NUL byte.", hint="Name a path inside a data root.")
        named = Path(text)  # `~` is not expanded: whose home would it be, the caller's or the daemon's?
        if not named.is_absolute() and ".." in named.parts:
            raise PathRefused(
                f"`{field}` names {text!r}, a relative name that climbs out with `..`; a relative name is a name "
                f"inside {roots[0].lexical}.",
                hint="Name the file inside that directory, or give an absolute path inside one of the roots.",
                details={"field": field},
            )
        candidate = named if named.is_absolute() else roots[0].lexical / named
        lexical = Path(os.path.normpath(candidate))
        root = next((r for r in roots if r.holds(lexical)), None)
        if root is None:
            raise PathRefused(
                f"`{field}` names {text!r}, which is outside the directories this daemon may use for it "
                f"({', '.join(str(r.lexical) for r in roots)}).",
                hint=f"Upload the file instead (the CLI does: PUT /v1/blobs), put it inside one of those "
                f"directories, or ask the operator to add a directory to {setting}.",
                details={"field": field},
            )
        real = lexical.resolve()
        if not (real == root.real or root.real in real.parents):
            raise PathRefused(
                f"`{field}` names {text!r}, which leaves {root.lexical} through a symbolic link.",
                hint="Name the file itself, inside the directory.",
                details={"field": field},
            )
        if not inside_home and self._is_home_state(real):
            raise PathRefused(
                f"`{field}` names {text!r}, which is the daemon's own state.",
                hint=f"Name a file in {', '.join(str(r.lexical) for r in self._public)} or another data root.",
                details={"field": field},
            )
        return real

    def _is_home_state(self, real: Path) -> bool:
        if not self.home.holds(real):
            return False
        return not any(r.holds(real) for r in self._public)


PR_SET_DUMPABLE = 4  # <linux/prctl.h>


def keep_environment_private() -> None:
    """Make the daemon not dumpable: its /proc/PID/environ (the secrets it holds) and memory become root's alone, so
    a process of the daemon's user (a sandboxed attempt below `namespaces`) cannot read them. Its children get
    their own, scrubbed environment (settings.child_environment) and are dumpable again after exec. Linux only."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: no /proc to read the environment from
        return


def secure_home(home: Path) -> None:
    """The home holds the ledger and the tokens: 0700, and what the daemon and its children create in it is
    0600 whatever the umask. Existing entries at its top two levels are tightened once at start."""
    os.umask(0o077)
    try:
        home.mkdir(parents=True, exist_ok=True, mode=HOME_DIR_MODE)
        entries = [home, *_top_entries(home)]
    except OSError:
        return  # a home the daemon cannot write: its lock step says what to do about that
    for path in entries:
        try:
            info = path.lstat()
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(info.st_mode):
            continue
        if stat.S_IMODE(info.st_mode) & 0o077:
            with contextlib.suppress(OSError):  # a read-only home: the lock step refuses it, saying why
                path.chmod(stat.S_IMODE(info.st_mode) & 0o700)  # the owner's bits stay; group and others lose theirs


def _top_entries(home: Path) -> list[Path]:
    entries: list[Path] = []
    for child in home.iterdir():
        entries.append(child)
        if child.is_dir() and not child.is_symlink():
            entries.extend(child.iterdir())
    return entries


def private_address(host: str) -> str | None:
    """Why `host` is an address of this machine or its link (loopback, link-local, unspecified), or None.

    A device host is where the daemon connects with a registered key; pointed at the daemon's own machine it
    would reach services bound to loopback only."""
    try:
        # A bracketed literal (`[::1]`, as in URLs and ssh_config) is that address to clients that unwrap it.
        infos = socket.getaddrinfo(host.removeprefix("[").removesuffix("]"), None, type=socket.SOCK_STREAM)
    except OSError:
        return None  # it does not resolve now: the preflight will say so
    for text in sorted({str(info[4][0]) for info in infos}):
        address = ipaddress.ip_address(text.split("%", 1)[0])
        for judged in (address, _embedded_ipv4(address)):
            if judged.is_loopback or judged.is_unspecified:
                return f"{host} is this machine ({text})"
            if judged.is_link_local:
                return f"{host} is a link-local address ({text})"
    return None


# An IPv6 address that carries an IPv4 one reaches it: a dual-stack socket connects `::ffff:a.b.c.d` to
# a.b.c.d, a NAT64 gateway forwards 64:ff9b::a.b.c.d there, a 6to4 relay 2002:AABB:CCDD::. Python 3.11 judges
# them as IPv6 only (`::ffff:127.0.0.1` is not loopback to it), so the IPv4 address is judged too.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def _embedded_ipv4(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The IPv4 address an IPv4-mapped, NAT64 or 6to4 address reaches; any other address itself."""
    if isinstance(address, ipaddress.IPv4Address):
        return address
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address.sixtofour or address


async def check_device_reach(settings: Settings, device: Mapping[str, Any]) -> None:
    """What a device record makes the daemon do on its host: load a key from the keys directory (and a
    known_hosts file from it), and connect to a host that is not this machine unless the operator allows it.

    Checked when a device is added, preflighted and used, so a record made before these rules cannot reach
    past them either."""
    paths = HostPaths(settings)
    paths.key_file(str(device["key_path"]), field="key_path")
    if device.get("known_hosts"):
        paths.key_file(str(device["known_hosts"]), field="known_hosts")
    await check_device_host(settings, str(device.get("device_id", "")), str(device["host"]))


async def check_device_host(settings: Settings, device_id: str, host: str) -> None:
    """A device's host is another machine, unless the operator allows this one and its link."""
    if settings.allow_private_device_hosts:
        return
    reason = await asyncio.to_thread(private_address, host)
    if reason is not None:
        raise PathRefused(
            f"Device {device_id}: {reason}; a device's host is another machine.",
            hint="An operator who means it sets BASHGYM_ALLOW_PRIVATE_DEVICE_HOSTS=true on the daemon.",
            details={"field": "host"},
        )
