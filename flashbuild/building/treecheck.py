"""Trees a build must refuse before anything is staged or compiled, with one paragraph each.

- **Submodules not checked out.** A plain `git clone` (no `--recursive`) leaves every folder
  `.gitmodules` names empty; the build then fails deep inside the compile on a missing CUTLASS
  header (xformers), or the setup.py tries to fetch it. Only submodules the build uses count:
  a folder an extension built for the target takes includes or sources from (setup.py, read
  with source/setuppy.py), or a path the tree's CMake files name. An empty ROCm-only
  submodule (xformers' composable_kernel_tiled) does not stop a CUDA build.
- **A version that cannot be read.** A tree versioned by setuptools_scm with neither git
  metadata nor a PKG-INFO (a tarball of the repository) stops setuptools_scm with "unable to
  detect version" in pip's metadata step; it is refused here with the two ways out.

Nothing here writes anything.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from flashbuild.building import staging
from flashbuild.errors import TreeError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from flashbuild.arch import Arch

_SUBMODULE = re.compile(r'^\s*\[submodule\s+"[^"]*"\]\s*$')
_KEY = re.compile(r"^\s*(path|url)\s*=\s*(.+?)\s*$")
_SCM_PYPROJECT = re.compile(r"^\s*\[tool\.setuptools_scm\]", re.MULTILINE)
_SCM_SETUP = re.compile(r"\buse_scm_version\s*=")
_SCM_ENV = ("SETUPTOOLS_SCM_PRETEND_VERSION",)


def gitmodules(tree: Path) -> list[tuple[str, str]]:
    """(path, url) of every `[submodule]` in the tree's `.gitmodules`."""
    try:
        text = (tree / ".gitmodules").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    out: list[tuple[str, str]] = []
    current: dict[str, str] = {}
    for line in [*text.splitlines(), '[submodule "end"]']:
        if _SUBMODULE.match(line):
            if "path" in current:
                out.append((current["path"].strip("/").replace("\\", "/"),
                            current.get("url", "")))
            current = {}
            continue
        m = _KEY.match(line)
        if m:
            current[m[1]] = m[2]
    return out


def _empty(folder: Path) -> bool:
    try:
        return not folder.is_dir() or not any(folder.iterdir())
    except OSError:
        return True


def _users(tree: Path, sub: str, *, platform: str, archs: Sequence[Arch]) -> list[str]:
    """What in the build uses the submodule folder `sub` (empty: nothing found)."""
    from flashbuild.source.setuppy import setup_for  # noqa: PLC0415  # start-up

    def inside(rel: str) -> bool:
        path = PurePosixPath(rel.replace("\\", "/"))
        return path == PurePosixPath(sub) or PurePosixPath(sub) in path.parents

    found: list[str] = []
    files = sorted(staging.scan(tree, reuse=True).files)
    setup = setup_for(files, lambda rel: _read(tree / rel), platform=platform, archs=archs)
    for ext in setup.extensions if setup is not None else ():
        if ext.built == "no":
            continue
        dirs = [d for d in ext.include_dirs if inside(d)]
        srcs = [s for s in ext.sources if inside(s)]
        if dirs or srcs:
            found.append(f"`{ext.name or 'an extension'}` of setup.py takes "
                         + ("includes from " + ", ".join(dirs[:2]) if dirs else
                            "sources from " + ", ".join(srcs[:2])))
    if setup is not None:
        return found
    # CMake: the path written out (include_directories, add_subdirectory, a source list).
    for rel in files:
        if not rel.endswith(("CMakeLists.txt", ".cmake")) or inside(rel):
            continue
        if sub in (_read(tree / rel) or ""):
            found.append(f"{rel} names {sub}")
            break
    return found


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def refuse_missing_submodules(tree: Path, *, platform: str, archs: Sequence[Arch]) -> None:
    """TreeError when a submodule the build uses is not checked out."""
    missing: list[tuple[str, str, list[str]]] = []
    for sub, url in gitmodules(tree):
        if not _empty(tree / sub):
            continue
        users = _users(tree, sub, platform=platform, archs=archs)
        if users:
            missing.append((sub, url, users))
    if not missing:
        return
    names = ", ".join(sub for sub, _u, _w in missing)
    raise TreeError(
        f"the tree's git submodule{'s' if len(missing) > 1 else ''} {names} "
        f"{'are' if len(missing) > 1 else 'is'} not checked out",
        evidence="; ".join(f"{sub} is empty (.gitmodules: {url or 'no url'}); "
                           f"{users[0]}" for sub, url, users in missing),
        fix=f"run `git submodule update --init --recursive` in {tree} and build again (a "
        "copy without git history: fetch each submodule at the commit the project pins)",
        details={"submodules": [sub for sub, _u, _w in missing]})


def refuse_unreadable_version(tree: Path, env: Mapping[str, str]) -> None:
    """TreeError when setuptools_scm versions the tree and nothing it reads is there."""
    pyproject = _read(tree / "pyproject.toml") or ""
    setup = _read(tree / "setup.py") or ""
    if not (_SCM_PYPROJECT.search(pyproject) or _SCM_SETUP.search(setup)):
        return
    if any(k in env for k in _SCM_ENV) or any(k.startswith(f"{_SCM_ENV[0]}_") for k in env):
        return
    archival = _read(tree / ".git_archival.txt")
    if (tree / "PKG-INFO").is_file() or _in_git(tree) or (
            archival is not None and "$Format" not in archival):
        return
    raise TreeError(
        "the tree's version cannot be read: setuptools_scm versions it from git, and the tree "
        "has no git metadata",
        evidence=f"{'pyproject.toml [tool.setuptools_scm]' if pyproject else 'setup.py '}"
        f"{'' if pyproject else 'use_scm_version='}; no .git in {tree} or above it, no "
        "PKG-INFO, no filled-in .git_archival.txt: setuptools_scm would stop with \"unable "
        "to detect version\"",
        fix="build from a git clone of the project, or give the version in the recipe: "
        "[[build.env]] set = { SETUPTOOLS_SCM_PRETEND_VERSION = \"X.Y.Z\" }")


def _in_git(tree: Path) -> bool:
    return any((folder / ".git").exists() for folder in (tree, *tree.parents))
