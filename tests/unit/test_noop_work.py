"""Issue 19 (speed): what an unchanged re-run of `flashbuild build TREE` does once, or not at
all. Measured on xformers' 1925-file tree (bench/bench_noop.py, docs/benchmarks.md): the patch
engine read every source for a recipe with no transform step, the setup.py was analysed twice,
torch's version was probed by two Python start-ups, and the user's tree was walked four times."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from flashbuild.arch import parse_arch_spec
from flashbuild.building import staging
from flashbuild.building.backends import setuptools
from flashbuild.patching import engine
from flashbuild.patching.transforms import _common
from flashbuild.recipes.load import parse_recipe
from flashbuild.recipes.when import make_context
from flashbuild.source import setuppy

LINUX90 = make_context(platform="linux", arch="sm_90a")

RECIPE = """[recipe]
name = "t"
version = "1"
[source]
path = "."
sources = ["**/*.cu"]
[build]
backend = "cmake"
"""

TRANSFORM_STEP = """
[[patch]]
id = "edit"
transform = "macro-edit"
when = {{ platform = "{platform}" }}
params = {{ files = ["k.cu"], find = "1000", replace = "1200", directives = ["define"] }}
"""


def _tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    for i in range(5):
        (tree / f"k{i}.cu").write_text("int k();\n")
    (tree / "k.cu").write_text("#define ARCH 1000\n")
    return tree


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = _common.is_text_source

    def counting(tree: Any, path: str) -> bool:
        seen.append(path)
        return real(tree, path)

    monkeypatch.setattr(_common, "is_text_source", counting)
    return seen


@pytest.mark.parametrize("steps", ["", TRANSFORM_STEP.format(platform="windows")])
def test_a_recipe_without_a_running_transform_reads_no_source(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, steps: str) -> None:
    tree = _tree(tmp_path)
    seen = _count_reads(monkeypatch)
    report = engine.patch_tree(parse_recipe(RECIPE + steps), tree, LINUX90)
    assert seen == [] and not report.files_written


def test_a_running_transform_still_gets_every_source(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = _tree(tmp_path)
    seen = _count_reads(monkeypatch)
    engine.patch_tree(parse_recipe(RECIPE + TRANSFORM_STEP.format(platform="linux")), tree,
                      LINUX90)
    assert sorted(set(seen)) == ["k.cu", "k0.cu", "k1.cu", "k2.cu", "k3.cu", "k4.cu"]
    assert (tree / "k.cu").read_text() == "#define ARCH 1200\n"


SETUP = """from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
setup(name="x", ext_modules=[CUDAExtension("x._C", ["{src}"])],
      cmdclass={{"build_ext": BuildExtension}})
"""


def test_the_setup_py_is_analysed_once_per_text(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = setuppy._analyze

    def counting(text: str, *args: Any, **kw: Any) -> setuppy.SetupPy:
        calls.append(text)
        return real(text, *args, **kw)

    monkeypatch.setattr(setuppy, "_analyze", counting)
    monkeypatch.setattr(setuppy, "_ANALYSED", {})
    archs = parse_arch_spec("sm_90a").archs
    texts = {"setup.py": SETUP.format(src="a.cu")}
    files = ["setup.py", "a.cu", "b.cu"]
    first = setuppy.setup_for(files, texts.get, platform="linux", archs=archs)
    again = setuppy.setup_for(files, texts.get, platform="linux", archs=archs)
    assert first is not None and first == again and len(calls) == 1
    # Another text, another target, another file list: analysed again, and right.
    texts["setup.py"] = SETUP.format(src="b.cu")
    changed = setuppy.setup_for(files, texts.get, platform="linux", archs=archs)
    assert changed is not None and changed.extensions[0].sources == ("b.cu",)
    setuppy.setup_for(files, texts.get, platform="windows", archs=archs)
    setuppy.setup_for([*files, "c.cu"], texts.get, platform="windows", archs=archs)
    assert len(calls) == 4


class _FindSpec:
    """Answers the `find_spec('torch')` subprocess, counting the Python start-ups."""

    def __init__(self, origin: Path) -> None:
        self.origin = origin
        self.runs = 0

    def run(self, argv: list[str], **kw: Any) -> SimpleNamespace:
        self.runs += 1
        return SimpleNamespace(ok=True, stdout=f"{self.origin}\n")


def test_torch_is_probed_once_per_request(tmp_path: Path) -> None:
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "version.py").write_text('__version__ = "2.11.0"\ncuda = "13.0"\n')
    runner = _FindSpec(tmp_path / "torch" / "__init__.py")
    request = SimpleNamespace(python="python", env={})
    probe = setuptools.probe_torch
    first = probe(request, runner)  # type: ignore[arg-type]
    assert probe(request, runner) == first and runner.runs == 1  # type: ignore[arg-type]
    # Another request (another run, another interpreter) asks again: nothing carried over.
    (tmp_path / "torch" / "version.py").write_text('__version__ = "2.12.0"\ncuda = "13.0"\n')
    other = probe(SimpleNamespace(python="python", env={}), runner)  # type: ignore[arg-type]
    assert other["version"] == "2.12.0" and runner.runs == 2


def test_the_users_tree_is_walked_once_inside_a_run(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    tree = _tree(tmp_path)
    walks: list[Path] = []
    real = staging._scan

    def counting(root: Path, skipped: set[Path]) -> staging.TreeScan:
        walks.append(root)
        return real(root, skipped)

    monkeypatch.setattr(staging, "_scan", counting)
    outside = tmp_path / "build"  # a build root beside the tree changes no walk
    with staging.source_walks():
        first = staging.scan(tree, skip=[outside], reuse=True)
        (tree / "new.cu").write_text("")
        assert staging.scan(tree, reuse=True) is first and len(walks) == 1
        # A caller that may follow a write (the mirror, a tree patched in place) walks afresh.
        assert "new.cu" in staging.scan(tree).files and len(walks) == 2
        # A skip inside the tree is another walk.
        (tree / "sub").mkdir()
        (tree / "sub" / "x.cu").write_text("")
        assert "sub/x.cu" not in staging.scan(tree, skip=[tree / "sub"], reuse=True).files
    # Outside a run nothing is remembered.
    assert "new.cu" in staging.scan(tree, reuse=True).files and len(walks) == 4
