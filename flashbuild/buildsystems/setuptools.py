"""setuptools: a top-level setup.py, typically with torch.utils.cpp_extension, built into a
wheel with this interpreter's pip (building/backends/setuptools.py)."""

from __future__ import annotations

import ast
import re
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

_TORCH_EXTENSION = re.compile(r"\b(?:CUDAExtension|CppExtension|BuildExtension)\b")


def runs_cmake(setup_text: str) -> bool:
    """Whether setup.py runs CMake itself (vllm's `cmake_build_ext`, natten's build_ext): an
    argument list or f-string in its code holds `cmake` or a `-DCMAKE_…` define. Then the
    CMakeLists.txt is what setup.py configures, with the variables it passes, and the build
    is setup.py's (record mode reads that configure). Docstrings and comments do not count:
    FlashRT's setup.py mentions `cmake ..` in its docstring only. `detect` counts it only in
    a setup.py whose build_ext it is (the step pip's build runs and record mode reads): one
    that runs CMake from build_py and copies the library (libKMCUDA) leaves the CMakeLists.txt
    the build, as recipe init drafts it."""
    if "cmake" not in setup_text.lower():
        return False
    try:
        tree = ast.parse(setup_text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    for node in ast.walk(tree):
        parts: list[ast.expr] = []
        if isinstance(node, ast.List | ast.Tuple):
            parts = list(node.elts)
        elif isinstance(node, ast.JoinedStr):
            parts = list(node.values)
        elif isinstance(node, ast.Call):
            parts = list(node.args)
        for part in parts:
            if isinstance(part, ast.Constant) and isinstance(part.value, str) and (
                    part.value == "cmake" or part.value.startswith("-DCMAKE_")):
                return True
    return False


def has_build_ext(setup_text: str) -> bool:
    """Whether setup.py's code gives it a build_ext of its own: a class deriving from
    `build_ext` (under any name it was imported as, or by module path, or from such a class
    of the file), or a `cmdclass` entry named `build_ext` (`{"build_ext": C}`,
    `dict(build_ext=C)`, `cmdclass["build_ext"] = C`). A comment or string that names
    build_ext is no build_ext."""
    try:
        tree = ast.parse(setup_text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    if any(_cmdclass_entry(node) for node in ast.walk(tree)):
        return True
    names = {"build_ext"} | {a.asname for node in ast.walk(tree)
                             if isinstance(node, ast.ImportFrom) for a in node.names
                             if a.name == "build_ext" and a.asname}
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    grew = True
    while grew:  # a class deriving from one of the file's build_ext classes is one too
        grew = False
        for cls in classes:
            if cls.name not in names and any(
                    (isinstance(b, ast.Name) and b.id in names) or
                    (isinstance(b, ast.Attribute) and b.attr == "build_ext")
                    for b in cls.bases):
                names.add(cls.name)
                grew = True
    return any(c.name in names for c in classes)


def _cmdclass_entry(node: ast.AST) -> bool:
    """Whether `node` names a `build_ext` command entry: `{"build_ext": C}`,
    `dict(build_ext=C)` or `cmdclass["build_ext"] = C`."""
    if isinstance(node, ast.Dict):
        return any(isinstance(k, ast.Constant) and k.value == "build_ext" for k in node.keys)
    if isinstance(node, ast.Call):
        return any(k.arg == "build_ext" for k in node.keywords)
    return isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and \
        isinstance(node.slice, ast.Constant) and node.slice.value == "build_ext"


class Setuptools:
    name: BackendName = "setuptools"
    title = "setup.py project built with torch.utils.cpp_extension"
    backend = "flashbuild.building.backends.setuptools:SetuptoolsBackend"
    introspection: IntrospectionKind = "setup-record"
    introspection_step = "recording setup.py"
    introspection_label = "setup.py in record mode"
    model_source = "setup.py record"
    target_noun = "extension"
    compiles_cmake_targets = False
    installs_recipe_artifacts = False
    steered_by_environment = True
    reads_torch_arch_list = True
    needs_torch_to_build = True
    runs_setup_py = True
    configured_by_pyproject = False

    def detect(self, tree: Path) -> Detection:
        path = tree / "setup.py"
        if not path.is_file():
            return NOT_FOUND
        text = read_text(path)
        if not text:
            return Detection(Confidence.EMPTY, "setup.py (empty or not readable)")
        if runs_cmake(text) and has_build_ext(text):
            return Detection(Confidence.DRIVER, "setup.py runs CMake itself")
        torch = _TORCH_EXTENSION.search(text)
        if torch:
            return Detection(Confidence.EXTENSION, f"setup.py uses {torch[0]}")
        if has_build_ext(text):
            # Its build_ext comes from elsewhere (deepspeed's `get_accelerator()
            # .build_extension()`): record mode shows what it compiles.
            return Detection(Confidence.EXTENSION, "setup.py gives itself a build_ext")
        return Detection(Confidence.PLAIN, "setup.py")


SETUPTOOLS = Setuptools()
