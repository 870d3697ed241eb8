"""Build backends: the one interface the driver builds a tree through.

The driver stages and patches the tree, then hands the backend a `BackendContext` and gets a
`BackendResult` back: what was compiled (or that nothing needed to be), the binaries, the log,
and for the setuptools backend the wheel pip built. The driver installs and writes the manifest;
it never knows which build system ran.

- `cmake` (backends/cmake.py): a CMakeLists.txt configured with Ninja; the arch reaches it as
  CMAKE_CUDA_ARCHITECTURES and, through the recipe, as the project's own variables.
- `setuptools` (backends/setuptools.py): a setup.py using torch.utils.cpp_extension, built into
  a wheel with this interpreter's pip and no build isolation.
- `skbuild` (backends/skbuild.py): a pyproject.toml whose build backend is scikit-build-core,
  built into a wheel the same way, with --arch, the toolkit and the launcher passed as its
  config settings (its `[tool.scikit-build]` is read by source/skbuild_settings.py).

`detect_backend(tree)` says which one a tree needs (recipe init drafts it); `backend_for()`
refuses, before anything runs, a recipe whose backend does not fit its tree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from flashbuild.errors import UsageError

if TYPE_CHECKING:
    from pathlib import Path

    from rich.console import Console

    from flashbuild.building.artifacts import BuiltArtifact
    from flashbuild.building.builddir import BuildDir
    from flashbuild.building.jobs import JobPlan
    from flashbuild.building.request import BuildRequest, PatchOutcome, Step, StreamRunner
    from flashbuild.recipes.model import BackendName, Recipe


@dataclass(frozen=True, kw_only=True)
class BackendContext:
    """What a backend is given: the request, the build folder, the (patched) tree to build."""

    request: BuildRequest
    folder: BuildDir
    tree: Path
    """The tree to build from: the build folder's patched mirror, or with --in-place the tree."""
    outcome: PatchOutcome
    nvcc: Path
    runner: StreamRunner
    console: Console | None = None
    show_progress: bool = False
    say: Step
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class BackendResult:
    """What a backend built."""

    source_dir: Path
    """The folder the build system ran from (CMake's source folder, the setup.py's folder)."""
    configured: bool
    """CMake configure ran (always False for setuptools, which has no separate step)."""
    no_work: bool
    """Nothing was compiled: everything was up to date."""
    edges: int
    log: Path
    artifacts: tuple[BuiltArtifact, ...]
    plan: JobPlan
    launcher: str = "none"
    argv: tuple[str, ...] = ()
    """The configure or build command (the manifest's flags are read from it)."""
    flags: dict[str, object] = field(default_factory=dict)
    """Flags for the manifest: `cuda`, `cxx`, and backend-specific entries."""
    ptxas: dict[str, list[str]] = field(default_factory=dict)
    """`ptxas info` lines of this run, per compiled file."""
    wheel: Path | None = None
    torch_version: str = ""
    """The torch the build compiled against (setuptools trees: `2.13.0+cu130`), for the
    wheel's local version label."""
    """The wheel the build produced (setuptools), installed as it is plus the shim."""
    configure_seconds: float = 0.0
    """How long CMake's configure took (0 when it did not run; setuptools has none)."""


class Backend(Protocol):
    name: BackendName

    def check_tree(self, tree: Path, recipe: Recipe) -> None:
        """Raise UsageError when this backend cannot build the tree (before anything runs)."""

    def preflight(self, request: BuildRequest, runner: StreamRunner) -> None:
        """Raise ToolchainError for what would make this backend fail (before staging)."""

    def build(self, ctx: BackendContext) -> BackendResult:
        """Configure and compile; find the binaries. Raises BuildError / Interrupted."""


_CPP_EXTENSION = re.compile(r"torch\.utils\.cpp_extension|\bCUDAExtension\b|\bBuildExtension\b")


def uses_cpp_extension(tree: Path) -> bool:
    """A setup.py at the top of the tree that builds with torch.utils.cpp_extension."""
    setup = tree / "setup.py"
    try:
        return bool(_CPP_EXTENSION.search(setup.read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return False


def detect_backend(tree: Path, cmake_source: str = ".") -> BackendName | None:
    """The backend a tree needs: setuptools for a torch cpp_extension setup.py, cmake for a
    CMakeLists.txt; None when it has neither. A tree with both (a setup.py that drives CMake
    itself, or a CMake project with a thin setup.py) is built by the one that compiles the
    CUDA code: the cpp_extension setup.py when there is one."""
    # scikit-build-core: the pyproject names the build pip runs, whatever else the tree has.
    if _skbuild_tree(tree):
        return "skbuild"
    if uses_cpp_extension(tree):
        return "setuptools"
    if (tree / cmake_source / "CMakeLists.txt").is_file():
        return "cmake"
    return None


def backend_for(recipe: Recipe, tree: Path) -> Backend:
    """The recipe's backend, after checking that the tree is one it can build."""
    from flashbuild.building.backends import cmake, setuptools  # noqa: PLC0415  # cycle

    backend: Backend = (setuptools.SetuptoolsBackend() if recipe.build.backend == "setuptools"
                        else cmake.CMakeBackend())
    if recipe.build.backend == "skbuild":  # a BuildSystem registry line once issue 26 lands
        from flashbuild.building.backends import skbuild  # noqa: PLC0415  # cycle

        backend = skbuild.SkbuildBackend()
    backend.check_tree(tree, recipe)
    return backend


def wrong_tree(recipe: Recipe, tree: Path, *, wanted: str, looked: str) -> UsageError:
    """The error for a recipe whose backend does not fit the tree, naming the one that does."""
    found = detect_backend(tree, recipe.build.cmake_source)
    if found is not None and found != recipe.build.backend:
        fix = (f"this tree is a {_DESCRIBE[found]}: set `[build] backend = \"{found}\"` in the "
               f"recipe (`flashbuild recipe init --source {tree}` drafts one)")
    else:
        fix = ("point --source at the tree's top folder, or write a recipe for it "
               f"(`flashbuild recipe init --source {tree}`)")
    return UsageError(
        f"the recipe `{recipe.name}` builds with {recipe.build.backend}, but {tree} has no "
        f"{wanted}",
        evidence=f"looked for {looked}; " + (f"the tree is a {_DESCRIBE[found]}"
                                             if found else "it has neither a CMakeLists.txt "
                                             "nor a setup.py using torch.utils.cpp_extension"),
        fix=fix,
    )


_DESCRIBE = {"setuptools": "setup.py project built with torch.utils.cpp_extension",
             "cmake": "CMake project",
             "skbuild": "pyproject.toml project built by scikit-build-core"}


def _skbuild_tree(tree: Path) -> bool:
    from flashbuild.source.skbuild_settings import is_skbuild  # noqa: PLC0415  # start-up

    return is_skbuild(tree)
