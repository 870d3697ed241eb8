"""Drafting a scikit-build-core tree (`recipe init`, the zero-config build).

The tree's CMake files are read as for a CMake tree (draft.py), from the CMakeLists.txt the
pyproject's `cmake.source-dir` names; then the draft becomes `[build] backend = "skbuild"`:
pip builds the wheel, scikit-build-core configures CMake with the pyproject's settings, and
the wheel's binaries are the artifacts (no `targets`, no `[[artifact]]` with a CMake target
to keep in step with the CMakeLists' install() rules). What the pyproject passes is said in
the draft's comments. Kept apart from draft.py so that it moves as one piece onto the
build-system registry (issue 26).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from flashbuild.errors import TreeError
from flashbuild.source import skbuild_settings

if TYPE_CHECKING:
    from collections.abc import Callable

    from flashbuild.scanning.draft import BuildDraft
    from flashbuild.source.skbuild_settings import SkbuildSettings


def settings_of(root: Path) -> SkbuildSettings | None:
    """The tree's scikit-build-core settings; None for any other tree (or an unreadable
    pyproject, which the build then reports)."""
    if not skbuild_settings.is_skbuild(root):
        return None
    try:
        return skbuild_settings.read_settings(root)
    except TreeError:
        return None


def top_cmakelists(root: Path, skb: SkbuildSettings) -> str | None:
    """The CMakeLists.txt scikit-build-core configures (relative to the tree), if present."""
    rel = PurePosixPath(skb.source_dir.replace("\\", "/")) / "CMakeLists.txt"
    return rel.as_posix() if (root / rel).is_file() else None


def as_skbuild(b: BuildDraft, skb: SkbuildSettings) -> None:
    """Turn a CMake-read draft into a scikit-build-core one (see the module docstring)."""
    b.backend = "skbuild"
    said = [f"cmake.source-dir = {skb.source_dir}"]
    if skb.defines:
        said.append("cmake.define " + ", ".join(f"{k}={v}" for k, v in skb.defines.items()))
    if skb.args:
        said.append("cmake.args " + " ".join(skb.args))
    if skb.wheel_packages is not None:
        said.append(f"wheel.packages {', '.join(skb.wheel_packages) or '(none)'}")
    b.notes["build"].append("pyproject.toml: scikit-build-core builds this tree ("
                            + "; ".join(said) + "); flashbuild passes --arch, the toolkit "
                            "and the launcher as its config settings")
    b.notes["build"] += [f"pyproject.toml: applied {o}" for o in skb.overrides]
    b.notes["build"] += [f"pyproject.toml: {u}" for u in skb.unsupported]
    b.todos = [t for t in b.todos if t.table != "artifact"]
    if b.package is None and not b.top_level and skb.wheel_packages:
        folder = skb.wheel_packages[0].replace("\\", "/").strip("/")
        b.package, b.package_dir = PurePosixPath(folder).name, folder
        b.notes["install"].append(f"the package wheel.packages names ({folder})")
        # The wheel holds what the package needs (llama-cpp-python's ctypes libraries): the
        # static reading's "no package imports a module" is answered.
        b.todos = [t for t in b.todos if t.table != "install"]


def render_build(b: BuildDraft, toml: Callable[[Any], str]) -> list[str]:
    """`[build]` and `[[build.options]]` of a scikit-build-core draft; the binaries the
    configured build makes are listed as a comment (the wheel's are the artifacts)."""
    out = [f"# {line}" for line in b.notes.get("build", ())]
    if b.artifacts:
        out.append("# binaries the configured CMake project builds (the wheel's binaries are "
                   "the artifacts): " + ", ".join(f"{a.name} ({a.kind}, target {a.target})"
                                                  for a in b.artifacts))
    out += ["[build]", f"backend = {toml(b.backend)}", ""]
    for define, comment in b.options:
        out += [f"# {comment}", "[[build.options]]", f"define = {toml(define)}", ""]
    return out
