"""Extensions a tree compiles at run time (`torch.utils.cpp_extension.load` as a module is
imported: exllama, aqlm), built ahead of time from the recipe's `[build] jit`: the recipe
field's checks, the loader shim that answers the package's load() with the built module, and
the build's refusal when a named file gave nothing to build."""

from __future__ import annotations

import ast
import json
import sys
import types
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from flashbuild.building.backends.setuptools import _jit_failure, jit_modules
from flashbuild.installing import shim
from flashbuild.installing.resources import loader_shim
from flashbuild.recipes.load import parse_recipe

if TYPE_CHECKING:
    from collections.abc import Iterator

_RECIPE = ('[recipe]\nname = "t"\n[source]\npath = "t"\n[build]\nbackend = "{backend}"\n'
           'jit = {jit}\n')


@pytest.mark.parametrize(("backend", "jit", "error"), [
    ("cmake", '["pkg/k.py"]', "needs backend"),
    ("setuptools", '["/abs/k.py"]', "inside the source tree"),
    ("setuptools", '["../k.py"]', "inside the source tree"),
    ("setuptools", '["pkg/k.cu"]', "not a Python file"),
])
def test_the_jit_field_is_checked_when_the_recipe_loads(backend: str, jit: str,
                                                        error: str) -> None:
    with pytest.raises(Exception, match=error):
        parse_recipe(_RECIPE.format(backend=backend, jit=jit), None)
    ok = parse_recipe(_RECIPE.format(backend="setuptools", jit='["pkg/k.py"]'), None)
    assert ok.build.jit == ("pkg/k.py",)
    spelled = parse_recipe(_RECIPE.format(backend="setuptools",
                                          jit='["./pkg/k.py", "pkg\\\\j.py"]'), None)
    assert spelled.build.jit == ("pkg/k.py", "pkg/j.py")


def test_the_shim_renders_the_names_it_answers() -> None:
    text = shim.render([], package="pkg", jit={"jitkern": "pkg.jitkern"})
    data = next(t for t in ast.parse(text).body if isinstance(t, ast.AnnAssign)
                and isinstance(t.target, ast.Name) and t.target.id == "JIT")
    assert data.value is not None and ast.literal_eval(data.value) == {"jitkern": "pkg.jitkern"}
    assert "JIT: dict[str, str] = {}" in shim.render([], package="pkg")


@pytest.fixture
def fake_torch(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    """A torch.utils.cpp_extension whose load() says what it would compile, and a built
    module `fakepkg.jitkern`."""
    calls: list[str] = []
    cpp = types.ModuleType("torch.utils.cpp_extension")

    def load(name: str, *args: object, **kwargs: object) -> str:
        calls.append(name)
        return f"compiled {name}"

    cpp.load = load  # type: ignore[attr-defined]
    cpp.calls = calls  # type: ignore[attr-defined]
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch.utils")
    torch.utils = utils  # type: ignore[attr-defined]
    utils.cpp_extension = cpp  # type: ignore[attr-defined]
    built = types.ModuleType("fakepkg.jitkern")
    for name, module in (("torch", torch), ("torch.utils", utils),
                         ("torch.utils.cpp_extension", cpp), ("fakepkg.jitkern", built)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setitem(sys.modules, "fakepkg", types.ModuleType("fakepkg"))
    yield cpp
    for name in ("jitkern", "second"):  # what the shim registered by the load() name
        sys.modules.pop(name, None)


def test_the_shim_answers_the_packages_load_with_the_built_module(
        fake_torch: types.ModuleType) -> None:
    assert loader_shim._answer_jit({"jitkern": "fakepkg.jitkern"}, env={})
    # What the package's own `from torch.utils.cpp_extension import load` now gets.
    from torch.utils.cpp_extension import load  # type: ignore[import-not-found]

    assert load("jitkern", sources=["k.cu"]) is sys.modules["fakepkg.jitkern"]
    # Importable by its load() name too (`from jitkern import scale`), as torch left it.
    assert sys.modules["jitkern"] is sys.modules["fakepkg.jitkern"]
    assert load("other", ["o.cu"]) == "compiled other"  # any other name compiles, as before
    assert fake_torch.calls == ["other"]  # type: ignore[attr-defined]
    # A second package's shim adds its names to the same stand-in.
    assert loader_shim._answer_jit({"second": "fakepkg.jitkern"}, env={})
    assert fake_torch.load("jitkern", []) is sys.modules["fakepkg.jitkern"]
    assert fake_torch.load("second", []) is sys.modules["fakepkg.jitkern"]


def test_the_answer_can_be_turned_off(fake_torch: types.ModuleType) -> None:
    real = fake_torch.load
    assert not loader_shim._answer_jit({"jitkern": "fakepkg.jitkern"},
                                       env={"FLASHBUILD_PREBUILT": "0"})
    assert not loader_shim._answer_jit({}, env={})
    assert fake_torch.load is real


class _Build:
    def __init__(self, jit: tuple[str, ...]) -> None:
        self.jit = jit


class _Recipe:
    def __init__(self, jit: tuple[str, ...]) -> None:
        self.build = _Build(jit)


class _Request:
    def __init__(self, jit: tuple[str, ...]) -> None:
        self.recipe = _Recipe(jit)


def test_a_jit_file_that_gave_nothing_stops_the_build_with_why(tmp_path: Path) -> None:
    report = tmp_path / "hook.jsonl"
    report.write_text("".join(json.dumps(r) + "\n" for r in [
        {"jit": "jitkern", "module": "pkg.jitkern", "file": "pkg/kern.py"},
        {"jit_problem": "pkg/lazy.py: ran to its end without calling "
                        "torch.utils.cpp_extension.load (a call inside a function …)"}]))
    assert jit_modules(report) == {"pkg.jitkern": "jitkern"}
    assert _jit_failure(_Request(("pkg/kern.py",)), report) is None  # type: ignore[arg-type]
    error = _jit_failure(_Request(("pkg/kern.py", "pkg/lazy.py")), report)  # type: ignore[arg-type]
    assert error is not None
    assert "`jit` file(s) pkg/lazy.py gave no extension" in str(error)
    assert "ran to its end without calling" in error.evidence
    assert "inside a function" in error.fix


def test_only_the_packages_own_files_are_candidates() -> None:
    from flashbuild.scanning.draft import package_loads
    from flashbuild.source.treemodel import JitSite

    load = "torch.utils.cpp_extension.load"
    sites = [JitSite("tests/bench_jit.py:7", load), JitSite("pkg/kern.py:10", load),
             JitSite("pkg/kern.py:30", load), JitSite("pkg/rtc.py:3", "nvrtcCreateProgram"),
             JitSite("examples/demo.py:2", load), JitSite("src/pkg/lazy.py:9", load)]
    assert package_loads(sites) == ["pkg/kern.py", "src/pkg/lazy.py"]


def test_a_tree_with_a_cmake_project_is_not_drafted_as_a_jit_setup(tmp_path: Path) -> None:
    # A pure-Python setup.py beside csrc/CMakeLists.txt (the real build), and a package file
    # that calls load(): the draft stays a CMake one (a review, 2026-11-29).
    from types import SimpleNamespace

    from flashbuild.arch import parse_arch_spec
    from flashbuild.scanning.draft import _setup_to_record

    (tmp_path / "setup.py").write_text("from setuptools import setup\nsetup(name='p')\n")
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(k LANGUAGES CXX CUDA)\n"
        "add_library(k SHARED k.cu)\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "kern.py").write_text(
        "from torch.utils.cpp_extension import load\nk = load(name='k', sources=['k.cu'])\n")
    result = SimpleNamespace(setup=None, target=SimpleNamespace(
        platform="linux", archs=parse_arch_spec("sm_90a").archs))
    assert _setup_to_record(tmp_path, result, recorded=True) is None  # type: ignore[arg-type]
    (tmp_path / "csrc" / "CMakeLists.txt").unlink()
    found = _setup_to_record(tmp_path, result, recorded=True)  # type: ignore[arg-type]
    assert found is not None and found.extensions == ()


def test_a_changed_build_hook_is_a_new_record(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # A stored model (and the build's no-op stamp) recorded by another hook must not be
    # reused: during this session a fixed hook still answered from a model the old one wrote.
    from flashbuild.pipeline import introspect

    (tmp_path / "sitecustomize.py").write_text("A = 1\n")
    monkeypatch.setattr(introspect, "_RESOURCES", tmp_path)
    introspect._hook_digest.cache_clear()
    before = introspect._hook_digest()
    (tmp_path / "sitecustomize.py").write_text("A = 2\n")
    introspect._hook_digest.cache_clear()
    try:
        assert introspect._hook_digest() != before
    finally:
        introspect._hook_digest.cache_clear()
