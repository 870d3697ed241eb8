"""Compiler launchers: sccache or ccache in front of nvcc and the host compiler.

`CMAKE_<LANG>_COMPILER_LAUNCHER` works with Ninja (FACTS.md, "GPU architectures"). sccache
caches nvcc; ccache cannot cache most nvcc calls because CMake compiles CUDA with `-MD`
(`--generate-dependencies-with-compile`), so with ccache only the C++ side is launched
through it (FACTS.md, "Building").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args

from flashbuild.errors import ToolchainError, UsageError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from flashbuild.proc import Runner

LauncherChoice = Literal["none", "auto", "sccache", "ccache"]
_ORDER: tuple[str, ...] = ("sccache", "ccache")
_CHOICES: dict[str, LauncherChoice] = {c: c for c in get_args(LauncherChoice)}


@dataclass(frozen=True)
class Launcher:
    """The chosen launcher, and whether nvcc goes through it too."""

    name: str
    path: Path
    cuda: bool
    note: str = ""


def parse_launcher(text: str) -> LauncherChoice:
    choice = _CHOICES.get(text.strip().lower())
    if choice is not None:
        return choice
    raise UsageError(f"`--launcher {text}` is not a launcher flashbuild knows",
                     fix="use none, auto, sccache or ccache")


def choose_launcher(choice: LauncherChoice, runner: Runner,
                    env: Mapping[str, str]) -> Launcher | None:
    """`auto` picks sccache, then ccache, when installed; a named one must exist."""
    if choice == "none":
        return None
    names = _ORDER if choice == "auto" else (choice,)
    for name in names:
        found = runner.which(name, env)
        if found:
            return _make(name, Path(found))
    if choice == "auto":
        return None
    raise ToolchainError(
        f"the compiler launcher {choice} was not found",
        evidence=f"`{choice}` is not on the PATH flashbuild builds with",
        fix=f"install {choice} (e.g. `pip install {choice}` where a wheel exists, or the OS "
        "package) or use `--launcher auto` / `--launcher none`",
    )


def _make(name: str, path: Path) -> Launcher:
    if name == "ccache":
        return Launcher(name, path, cuda=False,
                        note="ccache launches only the C++ compiles: CMake passes nvcc -MD, "
                        "which ccache cannot cache")
    return Launcher(name, path, cuda=True)
