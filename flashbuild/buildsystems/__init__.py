"""Build systems: everything flashbuild knows per way of building a tree, behind one protocol.

`ALL_BUILD_SYSTEMS` is the registry (cibuildwheel's `ALL_PLATFORM_MODULES`): one module per
build system, each exposing one `BuildSystem` object (base.py documents every member). The
stages ask the registry — `get(recipe.build.backend).compiles_cmake_targets`, `detect(tree)` —
and never compare names; tests/unit/test_build_systems.py fails on a comparison with a
build system's name outside this package and building/backends/.

`detect(tree)` is the one decision among candidates: each system's `detect` answers on one
`Confidence` scale and the highest wins (a tie: the one listed first). What that gives:
- a CMakeLists.txt that defines the project's library or module targets is the build, beside
  any setup.py that does not run CMake itself (a plugin the package loads);
- a CMakeLists.txt not written for IDEs wins over a setup.py that builds no torch extension
  (FlashRT's: `cmake ..` only in its docstring);
- a setup.py that builds torch extensions wins over a CMakeLists.txt that defines no library
  or module target, or packages a C++ library for CMake users (PyG's torch_scatter);
- a setup.py that runs CMake itself (vllm) wins over its CMakeLists.txt, and any setup.py
  over a CMakeLists.txt that says it serves IDEs;
- a pyproject.toml whose build backend is scikit-build-core is the build pip runs, whatever
  else the tree holds (`Confidence.BUILD_BACKEND`, above a setup.py that runs CMake).

Adding a build system: one module here with its object, and the object in ALL_BUILD_SYSTEMS
(the recipe loader and the schema take the names from there); its Backend class in
building/backends/, which its `backend` names (docs/development.md, "Adding a build
system").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flashbuild.buildsystems import cmake, setuptools, skbuild
from flashbuild.buildsystems.base import (
    BackendName,
    BuildSystem,
    Confidence,
    Detection,
    IntrospectionKind,
)

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["ALL_BUILD_SYSTEMS", "BackendName", "BuildSystem", "Confidence", "Detection",
           "IntrospectionKind", "candidates", "detect", "get", "names"]

#: The registry: every build system, in the order that breaks a tie in `detect`.
ALL_BUILD_SYSTEMS: tuple[BuildSystem, ...] = (cmake.CMAKE, setuptools.SETUPTOOLS, skbuild.SKBUILD)


def names() -> tuple[BackendName, ...]:
    """The names a recipe's `[build] backend` may take."""
    return tuple(s.name for s in ALL_BUILD_SYSTEMS)


def get(name: str) -> BuildSystem:
    """The build system a recipe names (the loader has checked the name)."""
    for system in ALL_BUILD_SYSTEMS:
        if system.name == name:
            return system
    raise KeyError(f"no build system is named {name!r}")


def candidates(tree: Path) -> list[tuple[BuildSystem, Detection]]:
    """Every build system whose files the tree has, best first, with its evidence."""
    found = [(s, s.detect(tree)) for s in ALL_BUILD_SYSTEMS]
    ranked = sorted(enumerate(found), key=lambda p: (-p[1][1].confidence, p[0]))
    return [pair for _i, pair in ranked if pair[1].confidence > Confidence.NONE]


def detect(tree: Path) -> BuildSystem | None:
    """The build system that builds the tree (its top folder); None when it has none."""
    found = candidates(tree)
    return found[0][0] if found else None
