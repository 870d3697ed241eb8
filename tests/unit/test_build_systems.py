"""Build systems are one module each behind one protocol (issue 26 item 1,
flashbuild/buildsystems/): the registry decides which one builds a tree, the stages ask it
questions and never compare names, and a new one reaches detection, the draft and the build
through its module and its registry line alone."""

from __future__ import annotations

import ast
import dataclasses
import sys
import types
import typing
from pathlib import Path

import pytest

from flashbuild import buildsystems
from flashbuild.building.backends import backend_for, detect_backend
from flashbuild.buildsystems import ALL_BUILD_SYSTEMS, BuildSystem, Confidence, Detection
from flashbuild.buildsystems.base import NOT_FOUND
from flashbuild.recipes.load import parse_recipe
from flashbuild.scanning import draft as draft_module
from flashbuild.scanning.proposals import handled_by_build
from tests.pysource import parse, parse_file

PACKAGE = Path(__file__).resolve().parents[2] / "flashbuild"

#: Where a build system's name may be compared: its own module and its Backend.
BUILD_SYSTEM_MODULES = ("buildsystems/", "building/backends/")

#: Compared operands named like this are not build systems: `kind == "cmake"` is the scan's
#: file kind (scanning/findings.py FileKind: a CMake file), another closed set.
OTHER_MEANINGS = frozenset({"kind"})

TORCH_SETUP = ("from setuptools import setup\n"
               "from torch.utils.cpp_extension import BuildExtension, CUDAExtension\n"
               "setup(name='t', ext_modules=[CUDAExtension('t._C', ['a.cu'])],\n"
               "      cmdclass={'build_ext': BuildExtension})\n")


# --- no name comparisons outside the build-system modules ------------------------------------

def _operand_name(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _names_in(node: ast.expr, names: frozenset[str]) -> list[str]:
    """The build-system names a compared operand spells: a string, or a tuple/list/set of them
    (`x in ("cmake", "setuptools")`)."""
    if isinstance(node, ast.Constant) and node.value in names:
        return [str(node.value)]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [str(e.value) for e in node.elts
                if isinstance(e, ast.Constant) and e.value in names]
    return []


def name_comparisons(source: str, names: frozenset[str]) -> list[tuple[int, str]]:
    """(line, name) for each comparison or `case` of a value with a build system's name."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(parse(source)):  # once per process: tests/pysource.py
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_operand_name(o) in OTHER_MEANINGS for o in operands):
                continue
            found += [(node.lineno, n) for o in operands for n in _names_in(o, names)]
        elif isinstance(node, ast.Match):
            if _operand_name(node.subject) in OTHER_MEANINGS:
                continue
            for case in node.cases:
                for sub in ast.walk(case.pattern):
                    if isinstance(sub, ast.MatchValue):
                        found += [(sub.lineno, n) for n in _names_in(sub.value, names)]
    return found


@pytest.mark.parametrize("source", [
    'if recipe.build.backend == "cmake":\n    pass\n',
    'ok = model.system != "setuptools"\n',
    'ok = backend in ("cmake", "other")\n',
    'ok = "setuptools" == b.backend\n',
    'match recipe.build.backend:\n    case "setuptools":\n        pass\n',
    'match b:\n    case "x" | "cmake":\n        pass\n',
])
def test_the_name_check_sees_every_form(source: str) -> None:
    names = frozenset({"cmake", "setuptools"})
    assert name_comparisons(source, names), source


def test_the_name_check_leaves_other_meanings_and_questions_alone() -> None:
    names = frozenset({"cmake", "setuptools"})
    assert name_comparisons('if file.kind == "cmake":\n    pass\n', names) == []
    assert name_comparisons("if system.compiles_cmake_targets:\n    pass\n", names) == []
    assert name_comparisons('get("cmake")\nx = {"setuptools": 1}\n', names) == []


def test_no_stage_compares_a_build_system_name() -> None:
    """Scan, recipe init, choose, ci and report ask the registry (`get(name).question`):
    a `== "cmake"`-style branch anywhere outside the build-system modules fails here."""
    names = frozenset(buildsystems.names())
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(BUILD_SYSTEM_MODULES):
            continue
        offenders += [f"flashbuild/{rel}:{line}: compares with {name!r}"
                      for line, name in name_comparisons(path.read_text(encoding="utf-8"),
                                                         names)]
    assert offenders == [], ("ask the build system a question instead (flashbuild/"
                             "buildsystems/base.py):\n" + "\n".join(offenders))


# --- the registry -------------------------------------------------------------------------------

def _members() -> list[str]:
    hints = typing.get_type_hints(BuildSystem, globalns=vars(buildsystems.base))
    return [*hints, "detect"]


@pytest.mark.parametrize("system", ALL_BUILD_SYSTEMS, ids=lambda s: s.name)
def test_each_build_system_answers_every_question(system: BuildSystem) -> None:
    for member in _members():
        assert hasattr(system, member), f"{system.name} lacks {member}"
    assert buildsystems.get(system.name) is system
    module, _, attr = system.backend.partition(":")
    assert module.startswith("flashbuild.building.backends.")
    backend = getattr(__import__(module, fromlist=[attr]), attr)
    assert backend.name == system.name


@pytest.mark.parametrize("system", ALL_BUILD_SYSTEMS, ids=lambda s: s.name)
def test_a_build_system_is_its_module_and_one_registry_line(system: BuildSystem) -> None:
    """The files a build system touches: its module in flashbuild/buildsystems/, one line in
    the registry (ALL_BUILD_SYSTEMS; the recipe loader and the schema take the names from
    there), and the Backend class its `backend` names. Nothing else imports its module:
    everyone else asks the registry."""
    module = sys.modules[type(system).__module__]
    path = Path(module.__file__ or "")
    assert path.parent == PACKAGE / "buildsystems"
    importers = []
    for other in sorted(PACKAGE.rglob("*.py")):
        tree = parse_file(other)  # once per process: tests/pysource.py
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (
                    node.module == module.__name__ or (
                        node.module == "flashbuild.buildsystems" and
                        any(a.name == path.stem for a in node.names))):
                importers.append(other.relative_to(PACKAGE).as_posix())
    assert importers == ["buildsystems/__init__.py"]
    registry = (PACKAGE / "buildsystems" / "__init__.py").read_text(encoding="utf-8")
    lines = [line for line in registry.splitlines()
             if "ALL_BUILD_SYSTEMS" in line and f"{path.stem}." in line]
    assert len(lines) == 1, lines


def test_the_recipe_takes_the_names_the_registry_holds(tmp_path: Path) -> None:
    from flashbuild.errors import RecipeError
    from flashbuild.recipes import schema

    enum = schema.generate()["$defs"]["Build"]["properties"]["backend"]["enum"]
    assert enum == list(buildsystems.names()) == ["cmake", "setuptools", "skbuild"]
    with pytest.raises(RecipeError) as err:
        parse_recipe('[recipe]\nname = "t"\n[build]\nbackend = "setuptool"\n', None)
    assert "must be one of 'cmake', 'setuptools'" in str(err.value)
    assert "'setuptools'" in err.value.evidence


# --- one decision among candidates ------------------------------------------------------------

@pytest.mark.parametrize(("files", "expected"), [
    ({}, None),
    ({"CMakeLists.txt": "project(x)\nadd_library(x SHARED x.cu)\n"}, "cmake"),
    ({"setup.py": "from setuptools import setup\nsetup(name='x')\n"}, "setuptools"),
    # A CMakeLists.txt that defines no target loses to a torch extension (test_backends) …
    ({"CMakeLists.txt": "project(x)\n", "setup.py": TORCH_SETUP}, "setuptools"),
    # … but not to a plain setup.py (FlashRT: `cmake ..` only in its docstring) …
    ({"CMakeLists.txt": "project(x)\n",
      "setup.py": '"""cmake .. && make"""\nfrom setuptools import setup\nsetup()\n'}, "cmake"),
    # … and one that defines its targets wins over it (a plugin the package loads).
    ({"CMakeLists.txt": "project(x)\nadd_library(p SHARED p.cu)\n", "setup.py": TORCH_SETUP},
     "cmake"),
    # … unless every target it defines is a static library, which no package loads (a C++
    # library beside the torch extension: diff-gaussian-rasterization).
    ({"CMakeLists.txt": "project(x)\nadd_library(r\n  a.cu\n  b.cu)\n"
                        "add_library(o OBJECT o.cu)\n", "setup.py": TORCH_SETUP},
     "setuptools"),
    ({"CMakeLists.txt": "project(x)\nadd_library(r STATIC a.cu)\n"}, "cmake"),
    # A library type from a variable is not known to be static: a cache entry, a -D or the
    # project's logic may make it SHARED (the package then loads it) …
    ({"CMakeLists.txt": "project(x)\nadd_library(m ${LIB_TYPE} a.cu)\n",
      "setup.py": TORCH_SETUP}, "cmake"),
    ({"CMakeLists.txt": "project(x)\nset(LIB_TYPE SHARED)\nadd_library(m ${LIB_TYPE} a.cu)\n",
      "setup.py": TORCH_SETUP}, "cmake"),
    # … unless the file sets it to a static kind, or it holds the sources (no type given).
    ({"CMakeLists.txt": "project(x)\nset(LIB_TYPE STATIC)\nadd_library(m ${LIB_TYPE} a.cu)\n",
      "setup.py": TORCH_SETUP}, "setuptools"),
    ({"CMakeLists.txt": "project(x)\nset(SRCS a.cu b.cu)\nadd_library(m ${SRCS})\n",
      "setup.py": TORCH_SETUP}, "setuptools"),
    ({"CMakeLists.txt": "project(x)\nfile(GLOB SRCS *.cu)\nadd_library(m ${SRCS})\n",
      "setup.py": TORCH_SETUP}, "setuptools"),
    ({"CMakeLists.txt": "project(x)\noption(BUILD_SHARED_LIBS \"\" ON)\nadd_library(r a.cu)\n",
      "setup.py": TORCH_SETUP}, "cmake"),
    ({"CMakeLists.txt": "project(x)\nadd_library(r STATIC a.cu)\nadd_library(p MODULE p.cu)\n",
      "setup.py": TORCH_SETUP}, "cmake"),
    # Targets defined in a subfolder count.
    ({"CMakeLists.txt": "project(x)\nadd_subdirectory(csrc)\n", "setup.py": TORCH_SETUP},
     "cmake"),
    # A setup.py that runs CMake itself as its build_ext (vllm) is the build …
    ({"CMakeLists.txt": "project(x)\nadd_library(_C MODULE a.cu)\n",
      "setup.py": "import subprocess\nfrom setuptools.command.build_ext import build_ext\n"
                  "class B(build_ext):\n    def run(self):\n"
                  "        subprocess.check_call(['cmake', '..'])\n"}, "setuptools"),
    # … one that runs it from build_py and copies the library is not (libKMCUDA).
    ({"CMakeLists.txt": "project(x)\nadd_library(K SHARED a.cu)\n",
      "setup.py": "import subprocess\nfrom setuptools.command.build_py import build_py\n"
                  "class B(build_py):\n    def run(self):\n"
                  "        subprocess.check_call(['cmake', '..'])\n"}, "cmake"),
    # … also when a comment or a string names build_ext: the code decides, not the text.
    ({"CMakeLists.txt": "project(x)\nadd_library(K SHARED a.cu)\n",
      "setup.py": "import subprocess\nfrom setuptools.command.build_py import build_py\n"
                  "# no build_ext here: the library is copied\n"
                  "class B(build_py):\n    \"\"\"Runs cmake, not build_ext.\"\"\"\n"
                  "    def run(self):\n"
                  "        subprocess.check_call(['cmake', '..'])\n"}, "cmake"),
    # build_ext under another name, by module path, or a command given as cmdclass's
    # build_ext is setup.py's build_ext.
    *[({"CMakeLists.txt": "project(x)\nadd_library(_C MODULE a.cu)\n",
        "setup.py": f"import subprocess\n{head}\n"
                    f"class B({base}):\n    def run(self):\n"
                    f"        subprocess.check_call(['cmake', '..'])\n{tail}"}, "setuptools")
      for head, base, tail in [
          ("from setuptools.command.build_ext import build_ext as _be", "_be", ""),
          ("import setuptools.command.build_ext as be", "be.build_ext", ""),
          ("from setuptools import Command, setup", "Command",
           "setup(cmdclass={'build_ext': B})\n"),
          ("from setuptools import Command, setup", "Command",
           "setup(cmdclass=dict(build_ext=B))\n")]],
    # A CMakeLists.txt for IDE indexing, beside any readable setup.py, is not the build.
    ({"CMakeLists.txt": "# for CLion indexing only\nproject(x)\nadd_library(x x.cu)\n",
      "setup.py": "from setuptools import setup\nsetup()\n"}, "setuptools"),
    ({"CMakeLists.txt": "# for CLion indexing only\nproject(x)\n", "setup.py": ""}, "cmake"),
])
def test_one_decision_among_candidates(files: dict[str, str], expected: str | None,
                                       tmp_path: Path) -> None:
    for rel, text in files.items():
        (tmp_path / rel).write_text(text, encoding="utf-8")
    system = buildsystems.detect(tmp_path)
    assert (system.name if system else None) == expected
    assert detect_backend(tmp_path) == expected
    for _system, detection in buildsystems.candidates(tmp_path):
        assert detection.evidence


# --- a new build system: its module and its registry line, nothing else ------------------------

class _Dummy:
    """A build system the test registers: a tree with a `dummy.build` file."""

    name = "dummy"
    title = "dummy project"
    backend = "dummy_backend_module:DummyBackend"
    introspection = "setup-record"
    introspection_step = "asking dummy"
    introspection_label = "a dummy run"
    model_source = "dummy"
    target_noun = "thing"
    compiles_cmake_targets = False
    installs_recipe_artifacts = False
    steered_by_environment = True
    reads_torch_arch_list = True
    needs_torch_to_build = False
    runs_setup_py = False
    configured_by_pyproject = False

    def detect(self, tree: Path) -> Detection:
        if (tree / "dummy.build").is_file():
            return Detection(Confidence.DRIVER, "dummy.build")
        return NOT_FOUND


class _DummyBackend:
    name = "dummy"
    checked: typing.ClassVar[list[Path]] = []

    def check_tree(self, tree: Path, recipe: object) -> None:
        self.checked.append(tree)


def test_a_registered_build_system_reaches_detection_the_draft_and_the_build(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dummy = _Dummy()
    backend_module = types.ModuleType("dummy_backend_module")
    backend_module.DummyBackend = _DummyBackend  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "dummy_backend_module", backend_module)
    # The one registry line:
    monkeypatch.setattr(buildsystems, "ALL_BUILD_SYSTEMS", (*ALL_BUILD_SYSTEMS, dummy))

    (tmp_path / "dummy.build").write_text("", encoding="utf-8")
    (tmp_path / "CMakeLists.txt").write_text("project(x)\nadd_library(x x.cu)\n",
                                             encoding="utf-8")
    # detect: the registry's one decision, and what building and scanning ask.
    assert buildsystems.detect(tmp_path) is dummy
    assert detect_backend(tmp_path) == "dummy"
    from flashbuild.scanning.scan import build_system
    assert build_system(tmp_path) is dummy

    # the recipe names it (the loader takes the registry's names) …
    recipe = parse_recipe('[recipe]\nname = "t"\n[build]\nbackend = "dummy"\n', None)
    assert recipe.build.backend == "dummy"
    # … and the build dispatches to the Backend it names.
    backend = backend_for(recipe, tmp_path)
    assert isinstance(backend, _DummyBackend)
    assert _DummyBackend.checked == [tmp_path]

    # the draft renders what its answers call for: [[build.env]] for an environment-steered
    # build, and the build hook's arch list handles a hard-coded gencode list.
    b = draft_module.BuildDraft(backend="dummy")
    b.env.append(({"platform": ["linux"]}, {"DUMMY_ARCH": "{arch_numbers}"}, "its switch"))
    rendered = "\n".join(draft_module._render_build(b))
    assert 'backend = "dummy"' in rendered
    assert "DUMMY_ARCH" in rendered
    from flashbuild.scanning.findings import Finding
    from flashbuild.scanning.proposals import ChooseArchList

    finding = typing.cast("Finding", types.SimpleNamespace(fix=types.SimpleNamespace(
        step=None, env=ChooseArchList())))
    assert handled_by_build(finding, backend="dummy")
    assert not handled_by_build(finding, backend="cmake")


def test_the_dummy_answers_every_question() -> None:
    for member in _members():
        assert hasattr(_Dummy, member), member
    assert {f.name for f in dataclasses.fields(Detection)} == {"confidence", "evidence"}


@pytest.mark.parametrize(("text", "builds"), [
    ("from torch.utils.cpp_extension import BuildExtension\nsetup(cmdclass={'build_ext': "
     "BuildExtension})\n", True),
    # deepspeed 0.19.8: its BuildExtension comes from an object; the text never names it.
    ("cmdclass = {}\ncmdclass['build_ext'] = get_accelerator().build_extension()\n"
     "setup(name='ds', ext_modules=ext_modules, cmdclass=cmdclass)\n", True),
    ("# build_ext is not used here\nsetup(name='plain', packages=['plain'])\n", False),
])
def test_the_setuptools_backend_takes_a_setup_py_with_a_build_ext_of_its_own(
        tmp_path: Path, text: str, builds: bool) -> None:
    from flashbuild.building.backends import uses_cpp_extension

    (tmp_path / "setup.py").write_text(text, encoding="utf-8")
    assert uses_cpp_extension(tmp_path) is builds
