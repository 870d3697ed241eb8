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

Which backend builds which tree is the build systems' (flashbuild/buildsystems/): each names
its Backend class here, `detect_backend(tree)` is the registry's decision, and `backend_for()`
refuses, before anything runs, a recipe whose backend does not fit its tree.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from flashbuild import buildsystems
from flashbuild.errors import UsageError

if TYPE_CHECKING:
    from pathlib import Path

    from rich.console import Console

    from flashbuild.building.artifacts import BuiltArtifact
    from flashbuild.building.builddir import BuildDir
    from flashbuild.building.jobs import JobPlan
    from flashbuild.building.request import BuildRequest, PatchOutcome, Step, StreamRunner
    from flashbuild.buildsystems import BackendName
    from flashbuild.recipes.model import Recipe


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
    """The wheel the build produced (setuptools), installed as it is plus the shim."""
    torch_version: str = ""
    """The torch the build compiled against (setuptools trees: `2.13.0+cu130`), for the
    wheel's local version label."""
    configure_seconds: float = 0.0
    """How long CMake's configure took (0 when it did not run; setuptools has none)."""


class Backend(Protocol):
    name: BackendName

    def check_tree(self, tree: Path, recipe: Recipe) -> None:
        """Raise UsageError when this backend cannot build the tree (before anything runs)."""

    def preflight(self, request: BuildRequest, runner: StreamRunner) -> tuple[str, ...]:
        """Raise ToolchainError for what would make this backend fail (before staging);
        return what it did about it that the user should know (one line each)."""

    def build(self, ctx: BackendContext) -> BackendResult:
        """Configure and compile; find the binaries. Raises BuildError / Interrupted."""


def uses_cpp_extension(tree: Path) -> bool:
    """A setup.py at the top of the tree that builds extensions: one that uses
    torch.utils.cpp_extension, as its text says, or gives itself a build_ext whose class its
    text does not name (deepspeed's comes from `get_accelerator().build_extension()`: record
    mode, not the text, shows whether it is torch's, and the arch check whether it compiled
    CUDA). The registry's detection decides (`buildsystems/setuptools.py`)."""
    found = buildsystems.get("setuptools").detect(tree)
    return found.confidence >= buildsystems.Confidence.EXTENSION


def detect_backend(tree: Path) -> BackendName | None:
    """The backend a tree needs: the registry's one decision (flashbuild/buildsystems/,
    `detect`); None when the tree has no build file any build system reads."""
    system = buildsystems.detect(tree)
    return system.name if system is not None else None


def backend_for(recipe: Recipe, tree: Path) -> Backend:
    """The recipe's backend, after checking that the tree is one it can build. Its build
    system names the class (`BuildSystem.backend`, `module:Class` in this package)."""
    module, _, attr = buildsystems.get(recipe.build.backend).backend.partition(":")
    backend: Backend = getattr(importlib.import_module(module), attr)()
    backend.check_tree(tree, recipe)
    return backend


def wrong_tree(recipe: Recipe, tree: Path, *, wanted: str, looked: str) -> UsageError:
    """The error for a recipe whose backend does not fit the tree, naming the one that does."""
    ranked = buildsystems.candidates(tree)
    found, why = ranked[0] if ranked else (None, None)
    if found is not None and found is not buildsystems.get(recipe.build.backend):
        fix = (f"this tree is a {found.title}: set `[build] backend = \"{found.name}\"` in "
               f"the recipe (`flashbuild recipe init --source {tree}` drafts one)")
    else:
        fix = ("point --source at the tree's top folder, or write a recipe for it "
               f"(`flashbuild recipe init --source {tree}`)")
    return UsageError(
        f"the recipe `{recipe.name}` builds with {recipe.build.backend}, but {tree} has no "
        f"{wanted}",
        evidence=f"looked for {looked}; " + (f"the tree is a {found.title} ({why.evidence})"
                                             if found and why else "it has neither a "
                                             "CMakeLists.txt nor a setup.py using "
                                             "torch.utils.cpp_extension"),
        fix=fix,
    )
