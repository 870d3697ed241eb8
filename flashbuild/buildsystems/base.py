"""The `BuildSystem` protocol: what every way of building a tree answers.

A build system is one module of this package exposing one object that satisfies `BuildSystem`
(as cibuildwheel keeps one module per platform behind `PlatformModule`). Its answers are
named for the question the rest of flashbuild asks (`compiles_cmake_targets`,
`reads_torch_arch_list`), never for the system, so scan, recipe init, choose, ci and report
read the answer and never compare names. The parts that need a later layer are named here and
found there: `backend` is the `building.backends` class that builds the tree, and
`introspection` says which of pipeline/introspect.py's two ways of asking a build what it
compiles (a CMake configure read through the File API, a setup.py record) applies.
"""

from __future__ import annotations

import enum
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from pathlib import Path

#: A build system's name, as a recipe's `[build] backend` gives it: one of
#: `buildsystems.names()` (the recipe loader checks it, the schema lists them), so a new
#: build system adds no name anywhere but in its own module.
BackendName = str

#: How introspection asks the build what it compiles (pipeline/introspect.py): configure the
#: CMake project into a scratch folder and read the File API replies, the same with the defines
#: and arguments a pyproject's `[tool.scikit-build]` passes, or run setup.py under the build
#: hook in record mode.
IntrospectionKind = Literal["cmake-configure", "setup-record", "pyproject-configure"]


class Confidence(enum.IntEnum):
    """How strongly a tree's files say it is built by one system: the one scale every
    `detect` answers on, so `buildsystems.detect` can decide among candidates (higher wins;
    a tie goes to the system listed first in `ALL_BUILD_SYSTEMS`)."""

    NONE = 0
    """Not this system: its build file is absent."""
    EMPTY = 1
    """Its build file is there but empty or unreadable."""
    SECONDARY = 2
    """Its build file says it serves something else (a CMakeLists.txt for IDE indexing)."""
    PLAIN = 3
    """Its build file is there, with no sign that it compiles what Python loads (a plain
    `setup()`)."""
    SIDE = 4
    """It compiles something, but not what the Python package loads (a CMake package for C++
    users, a CMakeLists.txt that defines no library or module target)."""
    EXTENSION = 5
    """It compiles Python extension modules through a known API (torch cpp_extension)."""
    PROJECT = 6
    """It defines the binaries the package loads itself (CMake library or module targets)."""
    DRIVER = 7
    """It drives another build system itself (a setup.py that runs CMake): it is the build,
    with the variables it passes."""
    BUILD_BACKEND = 8
    """pyproject.toml names it as the PEP 517 build backend pip runs (scikit-build-core):
    pip builds the tree through it, whatever other build files the tree holds."""


@dataclass(frozen=True)
class Detection:
    """One build system's reading of a tree: how strongly, and the evidence (one line)."""

    confidence: Confidence
    evidence: str


NOT_FOUND = Detection(Confidence.NONE, "")


class BuildSystem(Protocol):
    """One way a tree is built. Attributes are questions; each is documented once, here."""

    name: BackendName
    """The recipe's `[build] backend` value."""
    title: str
    """What such a tree is, for messages: "CMake project"."""
    backend: str
    """`module:Class` of the `building.backends` Backend that builds it (building resolves
    it, so this layer imports nothing above it)."""
    introspection: IntrospectionKind
    """How introspection asks this build what it compiles."""
    introspection_step: str
    """What introspection does, as a progress line: "configuring (no compile)"."""
    introspection_label: str
    """The same, as scan's stage names it: "a CMake configure"."""
    model_source: str
    """Where the configured model's targets come from, for scan's truth line."""
    target_noun: str
    """What one of those targets is called: "target", "extension"."""
    compiles_cmake_targets: bool
    """It compiles the targets of a CMakeLists.txt: the recipe's `cmake_source` and `targets`
    say where and which, CMake files are build inputs the scan checks, and the configured
    model's targets are the CMake targets this configuration defines."""
    installs_recipe_artifacts: bool
    """The recipe's `[[artifact]]` tables say which binaries the build makes and where they
    install; without them the build cannot run (a setup.py build places its modules
    itself)."""
    steered_by_environment: bool
    """It takes its switches from environment variables (setup.py's `os.environ` reads):
    recipe init drafts `[[build.env]]` tables and tries the switches the build reads."""
    reads_torch_arch_list: bool
    """torch's cpp_extension (through flashbuild's build hook) takes the arch from
    TORCH_CUDA_ARCH_LIST, replacing a gencode list hard-coded in the build script."""
    needs_torch_to_build: bool
    """torch must be installed for the build to run (CI installs it)."""
    runs_setup_py: bool
    """setup.py is the build's script: its static reading (packages, rules, the environment
    it reads) describes the build, and separable compilation is asked for there."""
    configured_by_pyproject: bool
    """pyproject.toml configures the CMake project (scikit-build-core's `[tool.scikit-build]`)
    and pip builds the wheel: the draft's `[build]` carries CMake defines passed as config
    settings, and the configured targets are a comment (the wheel's binaries are the
    artifacts)."""

    def detect(self, tree: Path) -> Detection:
        """How strongly the tree's top-level files say this system builds it."""
        ...


#: Build files above this size are not read for detection (generated, not written by hand).
MAX_BYTES = 1 << 22


def read_text(path: Path) -> str | None:
    """A build file's text for detection; None when it is not a readable regular file."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8", errors="replace").removeprefix("\ufeff")
