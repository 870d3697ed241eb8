"""Build folders keyed by what makes a build different.

One folder per (recipe, arch, platform, toolkit fingerprint, host compiler), under a build
root (default `<source>/../build/flashbuild/`, or the per-user cache for a tree inside an
installed package: see `default_root`), so switching arch keeps the other build and
switching back is a no-op. Each folder holds `flashbuild-key.json` saying what it is for.
A folder configured by another toolkit (an explicit `--build-dir` reused) is set aside with
a clear message instead of letting CMake fail with "CMAKE_CUDA_COMPILER changed".
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from flashbuild.building.cmake import read_cache_value, unfinished_configure

if TYPE_CHECKING:
    from collections.abc import Mapping

    from flashbuild.platforms.base import Platform

KEY_FILE = "flashbuild-key.json"


@dataclass(frozen=True)
class BuildKey:
    """What makes two builds of one tree different."""

    recipe: str
    arch: str
    """The arch as CMake gets it (`90a-real`)."""
    platform: str
    toolkit: str
    """A toolkit fingerprint: its nvcc path and version."""
    host_compiler: str
    """e.g. `gcc 13.3.0`, `msvc 14.44.35207`."""
    source: str = ""
    """The tree's resolved path: two sibling trees drafted under one recipe name share the
    default root (`<parent>/build/flashbuild/`), and without it the second tree's build found
    the first one's objects up to date and installed the first tree's module."""
    python: str = ""
    """The interpreter that builds: its headers and extension suffix go into the configure,
    so another Python in the same folder reconfigured and recompiled everything, each way."""

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()

    def folder_name(self) -> str:
        """Readable and unique: `csrc-90a-real-linux-1a2b3c4d`."""
        arch = re.sub(r"[^0-9A-Za-z]+", "_", self.arch).strip("_")
        recipe = re.sub(r"[^0-9A-Za-z.-]+", "_", self.recipe).strip("_")
        return f"{recipe}-{arch}-{self.platform}-{self.digest()[:8]}"


@dataclass(frozen=True)
class BuildDir:
    """A prepared build folder and what happened to a stale one."""

    path: Path
    key: BuildKey
    fresh: bool
    """True when nothing was configured here before."""
    set_aside: Path | None = None
    """Where a folder from another toolkit was moved (kept, not deleted)."""
    reason: str = ""


#: Folder names that mean "inside an installed Python package" (venvs and system Pythons use
#: site-packages, Debian's system Python dist-packages).
_INSTALLED_NAMES = frozenset({"site-packages", "dist-packages"})


def default_root(source_dir: Path, *, cache_dir: Path | None = None) -> Path:
    """`<source>/../build/flashbuild/`: next to a tree the user checked out.

    With `cache_dir` (the platform's `user_cache_dir`), a tree inside site-packages (the
    bundled `csrc/` of a regular wheel install) or under a folder the user cannot write gets
    `<cache_dir>/build/<tree name>-<hash of its path>` instead: a build folder next to it would
    land inside the installed package (or fail), and the hash keeps two installs apart."""
    source = source_dir.resolve()
    beside = source.parent / "build" / "flashbuild"
    if cache_dir is None or (not _installed(source) and _writable(beside)):
        return beside
    digest = hashlib.sha256(str(source).encode()).hexdigest()[:8]
    return cache_dir / "build" / f"{source.name}-{digest}"


def _installed(path: Path) -> bool:
    return any(part.lower() in _INSTALLED_NAMES for part in path.parts)


def _writable(path: Path) -> bool:
    """Whether `path` can be created or written: its nearest existing ancestor is writable."""
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    return os.access(probe, os.W_OK)


def prepare(key: BuildKey, nvcc: Path, *, root: Path | None = None,
            explicit: Path | None = None, source_dir: Path) -> BuildDir:
    """The folder for `key`: `explicit` (`--build-dir`) or `<root>/<key folder>`.

    When CMakeCache.txt names another CUDA compiler, the folder is renamed to
    `<name>.stale` (a previous stale copy is dropped) and a fresh one is used."""
    if explicit is None:
        explicit = (root or default_root(source_dir)) / key.folder_name()
    path = explicit.resolve()
    set_aside: Path | None = None
    reason = ""
    unfinished = unfinished_configure(path) if path.is_dir() else ""
    cached = read_cache_value(path, "CMAKE_CUDA_COMPILER")
    if unfinished:
        set_aside = _set_aside(path)
        reason = (f"{path} was set aside: {unfinished} (a file-size limit, a full disk or a "
                  f"kill), so CMake would reuse half-written files; it was moved to "
                  f"{set_aside} and the tree is configured afresh")
    elif cached is not None and not _same_file(Path(cached), nvcc):
        set_aside = path.with_name(path.name + ".stale")
        if set_aside.exists():
            shutil.rmtree(set_aside)
        path.replace(set_aside)
        reason = (f"{path} was configured with another CUDA compiler ({cached}, now {nvcc}); "
                  f"it was moved to {set_aside} and a fresh build folder is used")
    fresh = not (path / "CMakeCache.txt").is_file()
    path.mkdir(parents=True, exist_ok=True)
    key_file = path / KEY_FILE
    text = json.dumps({"key": asdict(key), "digest": key.digest()}, indent=1) + "\n"
    if not key_file.is_file() or key_file.read_text(encoding="utf-8") != text:
        key_file.write_text(text, encoding="utf-8")
    return BuildDir(path=path, key=key, fresh=fresh, set_aside=set_aside, reason=reason)


#: The sibling an unusable build folder is moved to: `<name>.flashbuild-stale-<UTC time>`.
STALE_MARK = ".flashbuild-stale-"


def _set_aside(path: Path) -> Path:
    """Move `path` to a dated sibling (kept, not deleted); earlier stale copies of the same
    folder are dropped, so repeated failures do not fill the disk."""
    for old in path.parent.glob(f"{path.name}{STALE_MARK}*"):
        shutil.rmtree(old, ignore_errors=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}{STALE_MARK}{stamp}")
    path.replace(target)
    return target


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and a.samefile(b))
    except OSError:
        return str(a).replace("\\", "/") == str(b).replace("\\", "/")


#: The folder under a build folder that stands in for an awkward TEMP.
TEMP_DIR = "tmp"


def with_ascii_temp(env: Mapping[str, str], folder: Path,
                    platform: Platform) -> dict[str, str]:
    """`env`, with TMP and TEMP pointed at `<build folder>/tmp` where nvcc would otherwise
    use a temp folder with spaces or non-ASCII characters on Windows.

    nvcc writes its intermediate files into TEMP and passes their paths to cl.exe; a profile
    such as `C:\\Users\\José Müller` breaks that (FACTS.md "Building"), and doctor's warning
    (detect/host.py) only says so. The stand-in is used when it is itself a plain path;
    names are replaced with the platform's rules (one `TEMP`, whatever its spelling)."""
    if not platform.msvc_host:
        return dict(env)
    lookup = platform.environ(env)
    awkward = [v for v in ("TMP", "TEMP") if lookup.get(v) and _awkward(lookup[v])]
    temp = folder / TEMP_DIR
    if not awkward or _awkward(str(temp)):
        return dict(env)
    temp.mkdir(parents=True, exist_ok=True)
    lookup.update({"TMP": str(temp), "TEMP": str(temp)})
    return dict(lookup)


def _awkward(path: str) -> bool:
    return " " in path or not path.isascii()
