"""What one build is given: the resolved request, the host compiler, what the patch step
produced, and the runner the build streams tools through. Shared by the driver and every
backend (building/backends/), so neither imports the other's internals."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Protocol

from flashbuild.building.jobs import DEFAULT_JOB_BYTES

if TYPE_CHECKING:
    import os
    from pathlib import Path

    from flashbuild.arch import ArchSpec
    from flashbuild.building.artifacts import InstallMode
    from flashbuild.building.launcher import LauncherChoice
    from flashbuild.detect.cuda import Toolkit
    from flashbuild.platforms.base import Platform
    from flashbuild.proc import Completed
    from flashbuild.recipes.model import Recipe


class StreamRunner(Protocol):
    """What the build needs from the runner: `ProcessRunner`'s run, which and stream."""

    def run(self, argv: Sequence[str | os.PathLike[str]], *, env: Mapping[str, str] | None = None,
            cwd: Path | None = None, timeout: float = 60.0, check: bool = True,
            input: str | None = None) -> Completed: ...

    def which(self, program: str, env: Mapping[str, str] | None = None) -> str | None: ...

    def stream(self, argv: Sequence[str | os.PathLike[str]], *, on_line: Callable[[str], None],
               log: IO[str] | None = None, env: Mapping[str, str] | None = None,
               cwd: Path | None = None, timeout: float | None = None) -> int: ...


@dataclass(frozen=True, kw_only=True)
class HostCompiler:
    """The host compiler nvcc uses: kind and version, for the build key and the manifest."""

    kind: str
    """`gcc`, `clang` or `msvc`."""
    version: str
    path: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.version}".strip()


@dataclass(frozen=True, kw_only=True)
class PatchOutcome:
    """What the build needs from the patch step (the lead adapts the engine's PatchReport)."""

    build_excludes: tuple[str, ...] = ()
    """Sources to leave out of the build (relative to the tree)."""
    applied: tuple[tuple[str, str], ...] = ()
    """(step id, sha256 of what it changed) per applied step, for the manifest."""
    changed_files: int = 0
    """Files this run wrote (0 on an unchanged re-run)."""
    patched: tuple[str, ...] = ()
    """Files that differ from the pristine tree (relative paths)."""


@dataclass(frozen=True, kw_only=True)
class BuildRequest:
    """Everything one build needs, already validated and resolved."""

    recipe: Recipe
    source_dir: Path
    """The tree (the recipe's source, or --source)."""
    staged: bool = True
    """Patch a mirror of the tree in the build folder (`<build>/src`) and build from it; the
    tree is never changed. False (`--in-place`): patch and build the tree itself."""
    arch: ArchSpec
    """Resolved: no `native` left."""
    toolkit: Toolkit
    """The toolkit doctor chose, or --cuda's."""
    cmake_toolkit_root: Path | None = None
    """A CMake-usable root for it (building.toolkit.cmake_toolkit_root); default its root."""
    pypi_home: Path | None = None
    """Where `pip install cuda-toolkit[...]` puts a toolkit for this Python
    (`site-packages/nvidia/cu13`): the literal path a fix names."""
    platform: Platform
    host_compiler: HostCompiler
    env: Mapping[str, str]
    """The build environment (on Windows: with MSVC activated, see msvc.py)."""
    jobs: int | None = None
    """`--jobs N`; None = auto."""
    launcher: LauncherChoice = "auto"
    install: InstallMode = "wheel"
    build_dir: Path | None = None
    """`--build-dir`: this exact folder instead of one keyed under the build root."""
    build_root: Path | None = None
    python: str = field(default_factory=lambda: sys.executable)
    cmake_defines: Mapping[str, str] = field(default_factory=dict)
    """The recipe's cmake options whose `when` matched."""
    cmake_args: tuple[str, ...] = ()
    build_env: Mapping[str, str] = field(default_factory=dict)
    """The recipe's `[[build.env]]` variables whose `when` matched, placeholders rendered."""
    cuda_flags: tuple[str, ...] = ()
    """Extra nvcc flags (e.g. the MSVC ones from msvc.py)."""
    cxx_flags: tuple[str, ...] = ()
    exclude_var: str | None = None
    """The recipe's [build] exclude_var."""
    output_dir_var: str | None = None
    """The recipe's [build] output_dir_var."""
    per_job_bytes: int = DEFAULT_JOB_BYTES
    cuda_job_pool_hook: bool = False
    """The project reads FLASHBUILD_NVCC_JOB_POOL and scopes the nvcc pool itself."""
    extra_dll_dirs: tuple[Path, ...] = ()
    """More folders for the shim (torch's lib when linked, PyPI nvidia/* folders in use)."""
    version: str = ""
    """Version of the installed distribution (default: the recipe's)."""
    notes: tuple[str, ...] = ()
    """What resolving the request decided that the user should know (the recipe's arch
    variant); the build report keeps them."""
    contain: bool = False
    """`build --contain`: the configure and compile run as introspection's do
    (platforms/contain.py): no network, every process they start ended with them."""
    install_requirements: bool = True
    """Install the tree's missing build requirements and its package's missing dependencies
    with everything already installed pinned (detect/pinned.py); `build --no-deps` (and
    `--contain`, which has no index) only names them."""


@dataclass(frozen=True)
class StepTime:
    name: str
    seconds: float
    skipped: bool = False
    note: str = ""
    parts: tuple[tuple[str, float], ...] = ()
    """The step's own stages and their seconds, when it has some (the backend's step: CMake's
    configure, then the compile); the build's closing table shows these."""


Step = Callable[[str], None]
"""Says one line about what the build did."""
