"""Build folders keyed by what makes a build different.

One folder per (recipe, arch, platform, toolkit fingerprint, host compiler), under a build
root (default `<source>/../build/flashbuild/`), so switching arch keeps the other build and
switching back is a no-op. Each folder holds `flashbuild-key.json` saying what it is for.
A folder configured by another toolkit (an explicit `--build-dir` reused) is set aside with
a clear message instead of letting CMake fail with "CMAKE_CUDA_COMPILER changed".
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from flashbuild.building.cmake import read_cache_value

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


def default_root(source_dir: Path) -> Path:
    return source_dir.resolve().parent / "build" / "flashbuild"


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
    cached = read_cache_value(path, "CMAKE_CUDA_COMPILER")
    if cached is not None and not _same_file(Path(cached), nvcc):
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


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and a.samefile(b))
    except OSError:
        return str(a).replace("\\", "/") == str(b).replace("\\", "/")
