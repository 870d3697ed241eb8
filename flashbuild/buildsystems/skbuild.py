"""scikit-build-core: a pyproject.toml whose build backend is scikit-build-core, which drives
CMake with its `[tool.scikit-build]` settings (read by source/skbuild_settings.py); built into
a wheel with this interpreter's pip (building/backends/skbuild.py)."""

from __future__ import annotations

import tomllib
from typing import TYPE_CHECKING

from flashbuild.buildsystems.base import (
    NOT_FOUND,
    BackendName,
    Confidence,
    Detection,
    IntrospectionKind,
    read_text,
)

if TYPE_CHECKING:
    from pathlib import Path


#: `[build-system] build-backend` of a scikit-build-core project (its docs, "Getting started").
BACKEND = "scikit_build_core.build"


def build_backend(tree: Path) -> str:
    """The pyproject's `[build-system] build-backend`; "" when there is none or the file is not
    TOML (the build reports that; detection only asks)."""
    path = tree / "pyproject.toml"
    text = read_text(path) if path.is_file() else None
    if text is None:
        return ""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return ""
    system = data.get("build-system")
    backend = system.get("build-backend") if isinstance(system, dict) else None
    return backend.strip() if isinstance(backend, str) else ""


class Skbuild:
    name: BackendName = "skbuild"
    title = "pyproject.toml project built by scikit-build-core"
    backend = "flashbuild.building.backends.skbuild:SkbuildBackend"
    introspection: IntrospectionKind = "pyproject-configure"
    introspection_step = "configuring with the pyproject's settings (no compile)"
    introspection_label = "a CMake configure with the pyproject's settings"
    model_source = "CMake File API"
    target_noun = "target"
    compiles_cmake_targets = True
    installs_recipe_artifacts = False
    steered_by_environment = False
    reads_torch_arch_list = False
    needs_torch_to_build = False
    runs_setup_py = False
    configured_by_pyproject = True

    def detect(self, tree: Path) -> Detection:
        if not build_backend(tree).startswith(BACKEND):
            return NOT_FOUND
        # The pyproject names the build pip runs, whatever else the tree holds (a
        # CMakeLists.txt it configures, a setup.py left for older tools).
        return Detection(Confidence.BUILD_BACKEND, f"pyproject.toml: build-backend = \"{BACKEND}\"")


SKBUILD = Skbuild()
