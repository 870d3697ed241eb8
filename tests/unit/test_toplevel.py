"""Artifacts that are not Python modules inside a package (issue 30): top-level extension
modules (`[install] top_level`, with or without a package) and CMake shared libraries a
package loads with ctypes. The recipe model, the draft (static reading of the fixture trees in
tests/fixtures/toplevel), the install (wheel contents, in place) and verify's reading of a
package-less install. Nothing is compiled here (tests/integration/test_build_toplevel.py
builds the fixtures)."""

from __future__ import annotations

import shutil
import sys
import sysconfig
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from flashbuild.arch import parse_arch_spec
from flashbuild.building.artifacts import BuiltArtifact
from flashbuild.cli import app
from flashbuild.errors import RecipeError, VerifyError
from flashbuild.installing import install as inst
from flashbuild.installing import shim
from flashbuild.installing.manifest import Manifest
from flashbuild.pipeline import driver
from flashbuild.platforms import get
from flashbuild.proc import Completed
from flashbuild.recipes.load import parse_recipe
from flashbuild.recipes.model import Install
from flashbuild.verifying.inputs import open_subject
from flashbuild.verifying.verify import Status, verify_install
from tests.fakes import ReplayRunner

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TREES = FIXTURES / "toplevel"
V = FIXTURES / "verify"
EXT = sysconfig.get_config_var("EXT_SUFFIX")

BASE = """[recipe]
name = "t"
[build]
backend = "{backend}"
"""


# --- the recipe model ----------------------------------------------------------------------

def test_an_install_of_top_level_modules_needs_no_package() -> None:
    recipe = parse_recipe(BASE.format(backend="setuptools")
                          + '[install]\ntop_level = ["rotary_emb"]\n', None)
    assert recipe.install == Install(top_level=("rotary_emb",))
    assert recipe.install.name == "rotary_emb"
    assert recipe.install.describe() == "top-level module `rotary_emb`"
    both = Install(package="foo", package_dir="src/foo", top_level=("foo_cuda",))
    assert both.name == "foo"
    assert both.describe() == "package `foo` from src/foo; top-level module `foo_cuda`"


@pytest.mark.parametrize(("table", "message"), [
    ('package = "foo"\n', "`package` and `package_dir` go together"),
    ('package_dir = "foo"\n', "`package` and `package_dir` go together"),
    ("", "needs `package` and `package_dir`, or `top_level`"),
    ('top_level = ["pkg.mod"]\n', "is not a module name"),
    ('top_level = ["a", "a"]\n', "names a module twice"),
])
def test_an_install_table_that_says_too_little_is_refused(table: str, message: str) -> None:
    with pytest.raises(RecipeError, match=message):
        parse_recipe(BASE.format(backend="setuptools") + "[install]\n" + table, None)


def test_a_cmake_artifact_without_a_package_must_be_a_listed_top_level_module() -> None:
    arts = ('[[artifact]]\nname = "fastops"\nkind = "module"\ntarget = "fastops"\n'
            '[[artifact]]\nname = "helper"\nkind = "plugin"\ntarget = "helper"\n')
    with pytest.raises(RecipeError, match="`helper` has nowhere to install"):
        parse_recipe(BASE.format(backend="cmake") + arts + '[install]\ntop_level = ["fastops"]\n',
                     None)
    with pytest.raises(RecipeError, match="`top_level` names the plugin `helper`"):
        parse_recipe(BASE.format(backend="cmake") + arts
                     + '[install]\npackage = "p"\npackage_dir = "p"\n'
                     'top_level = ["fastops", "helper"]\n', None)
    ok = parse_recipe(BASE.format(backend="cmake") + arts
                      + '[install]\npackage = "p"\npackage_dir = "p"\ntop_level = ["fastops"]\n',
                      None)
    assert ok.install is not None and ok.install.top_level == ("fastops",)


def test_top_level_is_in_the_committed_schema() -> None:
    from flashbuild.recipes.schema import SCHEMA_PATH

    text = SCHEMA_PATH.read_text(encoding="utf-8")
    assert '"top_level"' in text


# --- the draft (static reading: nothing from the tree runs) ---------------------------------

def _draft(tmp_path: Path, tree: str) -> str:
    out = tmp_path / f"{tree}.toml"
    res = CliRunner().invoke(app, ["recipe", "init", "--draft", "--source", str(TREES / tree),
                                   "--static", "--platform", "linux", "--arch", "sm_90a",
                                   "-o", str(out)])
    assert res.exit_code == 0, res.output
    return out.read_text(encoding="utf-8")


def test_a_setup_py_module_with_no_package_is_drafted_as_top_level(tmp_path: Path) -> None:
    # rotary-emb's shape: the draft used to end in "TODO: [install] no package for the
    # extension modules of setup.py", and the zero-config build stopped with exit 4.
    text = _draft(tmp_path, "topmod")
    recipe = parse_recipe(text, tmp_path / "topmod.toml")
    assert recipe.install == Install(top_level=("topmod",))
    assert "TODO: [install]" not in text
    assert "pip installs it at the top of site-packages" in text
    assert "no loader shim" in text


def test_a_top_level_module_beside_its_package_keeps_both(tmp_path: Path) -> None:
    text = _draft(tmp_path, "beside")
    recipe = parse_recipe(text, tmp_path / "beside.toml")
    assert recipe.install == Install(package="beside", package_dir="beside",
                                     top_level=("beside_cuda",))
    assert "beside/__init__.py imports it" in text


def test_a_package_under_a_package_dir_root_that_imports_the_module(tmp_path: Path) -> None:
    # spatial-correlation-sampler: `package_dir={"": "Correlation_Module"}`.
    tree = tmp_path / "scs"
    (tree / "Mod" / "scs").mkdir(parents=True)
    (tree / "Mod" / "scs" / "__init__.py").write_text("")
    (tree / "Mod" / "scs" / "ops.py").write_text("import scs_backend as backend\n")
    (tree / "k.cu").write_text("__global__ void k() {}\n")
    (tree / "setup.py").write_text(
        "from setuptools import setup\n"
        "from torch.utils.cpp_extension import BuildExtension, CUDAExtension\n"
        "setup(name='scs', packages=['scs'], package_dir={'': 'Mod'},\n"
        "      ext_modules=[CUDAExtension('scs_backend', ['k.cu'])],\n"
        "      cmdclass={'build_ext': BuildExtension})\n")
    out = tmp_path / "scs.toml"
    res = CliRunner().invoke(app, ["recipe", "init", "--draft", "--source", str(tree),
                                   "--static", "--platform", "linux", "--arch", "sm_90a",
                                   "-o", str(out)])
    assert res.exit_code == 0, res.output
    recipe = parse_recipe(out.read_text(encoding="utf-8"), out)
    assert recipe.install == Install(package="scs", package_dir="Mod/scs",
                                     top_level=("scs_backend",))


def test_a_shared_library_written_into_its_package_is_that_packages(tmp_path: Path) -> None:
    text = _draft(tmp_path, "ctypeslib")
    recipe = parse_recipe(text, tmp_path / "ctypeslib.toml")
    assert [(a.name, a.kind, a.target) for a in recipe.artifact] == [
        ("ctlib_cuda", "plugin", "ctlib_cuda")]
    assert recipe.install == Install(package="ctlib", package_dir="ctlib")
    assert "CMakeLists.txt:7: the CMakeLists writes ctlib_cuda into ctlib/" in text
    assert "ctlib/__init__.py:6 names libctlib_cuda.so" in text
    # Its output folder is the package's: no "cannot point them at its build folder" TODO.
    assert "# TODO:" not in text
    assert "no [verify] exports: ctlib_cuda is a shared library the package loads itself " \
        "(ctypes)" in text
    assert recipe.verify.exports == ()


def _cmake_tree(root: Path, lists: str, init: str, name: str = "pkg") -> Path:
    (root / name).mkdir(parents=True)
    (root / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.26)\nproject(t LANGUAGES CUDA)\n" + lists)
    (root / "k.cu").write_text("__global__ void k() {}\n")
    (root / name / "__init__.py").write_text(init)
    return root


@pytest.mark.parametrize(("lists", "init", "how"), [
    # install(TARGETS … DESTINATION pkg): the wheel's root is the install prefix.
    ("add_library(kern SHARED k.cu)\ninstall(TARGETS kern LIBRARY DESTINATION pkg)\n", "",
     "install(TARGETS kern … DESTINATION pkg), the package `pkg`"),
    # Only the package says so: it loads the library with ctypes.
    ("add_library(kern SHARED k.cu)\n",
     "import ctypes, os\n_here = os.path.dirname(__file__)\n"
     "_lib = ctypes.cdll.LoadLibrary(os.path.join(_here, 'libkern.so'))\n",
     "pkg/__init__.py:3 names libkern.so, and the module loads libraries with ctypes"),
])
def test_other_ways_a_shared_library_belongs_to_a_package(tmp_path: Path, lists: str,
                                                          init: str, how: str) -> None:
    tree = _cmake_tree(tmp_path / "t", lists, init)
    out = tmp_path / "t.toml"
    res = CliRunner().invoke(app, ["recipe", "init", "--draft", "--source", str(tree),
                                   "--static", "--platform", "linux", "--arch", "sm_90a",
                                   "-o", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text(encoding="utf-8")
    recipe = parse_recipe(text, out)
    assert recipe.install == Install(package="pkg", package_dir="pkg")
    assert how in text


def test_a_shared_library_nothing_claims_still_asks_for_install(tmp_path: Path) -> None:
    tree = _cmake_tree(tmp_path / "t", "add_library(kern SHARED k.cu)\n", "X = 1\n")
    out = tmp_path / "t.toml"
    res = CliRunner().invoke(app, ["recipe", "init", "--draft", "--source", str(tree),
                                   "--static", "--platform", "linux", "--arch", "sm_90a",
                                   "-o", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text(encoding="utf-8")
    assert parse_recipe(text, out).install is None
    assert "# TODO: [install]" in text


def test_a_cmake_module_no_package_imports_is_installed_by_its_name(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    tree.mkdir()
    (tree / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.26)\nproject(t LANGUAGES CXX CUDA)\n"
        "find_package(pybind11 CONFIG REQUIRED)\npybind11_add_module(fastops b.cpp k.cu)\n")
    (tree / "b.cpp").write_text('#include <pybind11/pybind11.h>\nint f();\n'
                                'PYBIND11_MODULE(fastops, m) { m.def("f", &f); }\n')
    (tree / "k.cu").write_text("__global__ void k() {}\nint f() { return 1; }\n")
    out = tmp_path / "t.toml"
    res = CliRunner().invoke(app, ["recipe", "init", "--draft", "--source", str(tree),
                                   "--static", "--platform", "linux", "--arch", "sm_90a",
                                   "-o", str(out)])
    assert res.exit_code == 0, res.output
    recipe = parse_recipe(out.read_text(encoding="utf-8"), out)
    assert recipe.install == Install(top_level=("fastops",))
    assert recipe.verify.exports == ("fastops.f",)


# --- placing the artifacts, the manifest's paths ----------------------------------------------

def _request(install: str) -> SimpleNamespace:
    recipe = parse_recipe(BASE.format(backend="cmake")
                          + '[[artifact]]\nname = "fastops"\nkind = "module"\n'
                          'target = "fastops"\n' + install, None)
    return SimpleNamespace(recipe=recipe)


def test_a_top_level_cmake_module_is_placed_at_the_import_root(tmp_path: Path) -> None:
    built = (BuiltArtifact(tmp_path / f"fastops{EXT}", "module", "fastops"),)
    request = _request('[install]\ntop_level = ["fastops"]\n')
    placed = driver.place_artifacts(request, built)  # type: ignore[arg-type]
    assert placed[0].relpath == f"fastops{EXT}"
    # The manifest lies in the wheel's .dist-info, one level below the root.
    assert driver._manifest_path(request, placed[0]) == f"../fastops{EXT}"  # type: ignore[arg-type]
    beside = _request('[install]\npackage = "p"\npackage_dir = "p"\ntop_level = ["fastops"]\n')
    assert driver._manifest_path(  # type: ignore[arg-type]
        beside, driver.place_artifacts(beside, built)[0]) == f"../fastops{EXT}"  # type: ignore[arg-type]
    inside = _request('[install]\npackage = "p"\npackage_dir = "p"\n')
    assert driver.place_artifacts(inside, built)[0].relpath == ""  # type: ignore[arg-type]


# --- install ---------------------------------------------------------------------------------

def _module(tmp_path: Path, name: str = "topmod") -> BuiltArtifact:
    out = tmp_path / "build" / "out"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}{EXT}"
    path.write_bytes(b"\x7fELF fresh module")
    return BuiltArtifact(path, "module", name, relpath=path.name)


def _plan(tmp_path: Path, mode: str, **over: object) -> inst.InstallPlan:
    base: dict[str, object] = dict(
        mode=mode, package=None, package_dir=None, artifacts=(_module(tmp_path),),
        dll_dirs=(), manifest_name="flashbuild-manifest.json",
        manifest=b'{"recipe": "topmod"}\n', python=sys.executable, version="0.1+sm90a",
        work_dir=tmp_path / "build", tree=tmp_path / "tree")
    base.update(over)
    return inst.InstallPlan(**base)  # type: ignore[arg-type]


def _pip(site: Path, calls: list[tuple[str, ...]]) -> ReplayRunner:
    runner = ReplayRunner()

    def respond(argv: tuple[str, ...]) -> Completed:
        if argv[1] == "-c":
            return Completed(argv, 0, f"{site}\n", "")
        calls.append(argv)
        return Completed(argv, 0, "", "")

    runner.responses[(Path(sys.executable).name,)] = respond
    return runner


def test_a_wheel_of_top_level_modules_only(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    calls: list[tuple[str, ...]] = []
    plan = _plan(tmp_path, "wheel")
    result = inst.install(plan, _pip(site, calls), {})
    assert result.wheel is not None and calls and calls[0][-1] == str(result.wheel)
    assert result.location == site
    assert result.wheel.name.startswith("topmod-0.1+sm90a-")
    with zipfile.ZipFile(result.wheel) as zf:
        names = set(zf.namelist())
        assert f"topmod{EXT}" in names
        meta = "topmod-0.1+sm90a.dist-info"
        assert zf.read(f"{meta}/flashbuild-manifest.json") == plan.manifest
        assert zf.read(f"{meta}/top_level.txt") == b"topmod\n"
        assert f"{meta}/flashbuild-manifest.json,sha256=" in zf.read(f"{meta}/RECORD").decode()
        assert not any(shim.SHIM_MODULE in n or n.endswith("__init__.py") for n in names)
    assert site / f"topmod{EXT}" in result.files
    assert site / "topmod-0.1+sm90a.dist-info" / "flashbuild-manifest.json" in result.files
    assert any("no loader shim" in n for n in result.notes)


def test_a_setup_py_wheel_without_a_package_gets_the_manifest_in_dist_info(
        tmp_path: Path) -> None:
    prebuilt = tmp_path / "pip" / "topmod-0.1-cp311-cp311-linux_x86_64.whl"
    prebuilt.parent.mkdir()
    with zipfile.ZipFile(prebuilt, "w") as zf:
        zf.writestr(f"topmod{EXT}", b"\x7fELF from pip")
        zf.writestr("topmod-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: topmod\n")
        zf.writestr("topmod-0.1.dist-info/RECORD", "")
    site = tmp_path / "site"
    site.mkdir()
    plan = _plan(tmp_path, "wheel", prebuilt=prebuilt)
    result = inst.install(plan, _pip(site, []), {})
    assert result.wheel is not None
    with zipfile.ZipFile(result.wheel) as zf:
        assert zf.read(f"topmod{EXT}") == b"\x7fELF from pip"
        assert zf.read("topmod-0.1.dist-info/flashbuild-manifest.json") == plan.manifest
        assert not any(shim.SHIM_MODULE in n for n in zf.namelist())
    assert site / "topmod-0.1.dist-info" / "flashbuild-manifest.json" in result.files


def test_a_cmake_wheel_puts_a_top_level_module_beside_the_package(tmp_path: Path) -> None:
    pkg = tmp_path / "tree" / "p"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("import fastops\n")
    site = tmp_path / "site"
    site.mkdir()
    plan = _plan(tmp_path, "wheel", package="p", package_dir=pkg,
                 artifacts=(_module(tmp_path, "fastops"),))
    result = inst.install(plan, _pip(site, []), {})
    assert result.wheel is not None
    with zipfile.ZipFile(result.wheel) as zf:
        names = set(zf.namelist())
        assert f"fastops{EXT}" in names and f"p/fastops{EXT}" not in names
        assert "p/flashbuild-manifest.json" in names and f"p/{shim.SHIM_MODULE}.py" in names
        assert zf.read(f"{plan.distribution or 'p'}-0.1+sm90a.dist-info/top_level.txt") == \
            b"p\nfastops\n"
    assert site / f"fastops{EXT}" in result.files


def test_in_place_without_a_package_writes_the_modules_at_the_top_of_the_tree(
        tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "setup.py").write_text("")
    plan = _plan(tmp_path, "inplace")
    result = inst.install(plan, ReplayRunner(), {})
    assert (tree / f"topmod{EXT}").read_bytes() == b"\x7fELF fresh module"
    assert sorted(p.name for p in tree.iterdir()) == ["setup.py", f"topmod{EXT}"]
    assert result.location == tree and result.files == (tree / f"topmod{EXT}",)
    (note,) = result.notes
    assert "copied to the top of the tree" in note and "`import topmod`" in note
    assert "no loader shim" in note and "no manifest" in note
    assert inst.install(plan, ReplayRunner(), {}).skipped


def test_in_place_beside_a_package_says_where_the_module_went(tmp_path: Path) -> None:
    pkg = tmp_path / "tree" / "p"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("import fastops\n")
    plan = _plan(tmp_path, "inplace", package="p", package_dir=pkg,
                 artifacts=(_module(tmp_path, "fastops"),))
    result = inst.install(plan, ReplayRunner(), {})
    assert (tmp_path / "tree" / f"fastops{EXT}").is_file()
    assert (pkg / "flashbuild-manifest.json").is_file()
    assert any(f"copied to {tmp_path / 'tree'}, beside the package" in n for n in result.notes)


# --- verify a package-less install -------------------------------------------------------------

def _manifest(**over: object) -> bytes:
    from flashbuild.installing.manifest import Artifact, HostCompiler, Toolkit

    fields: dict[str, object] = dict(
        flashbuild="0", recipe="topmod", platform="linux", archs=("sm_120",),
        toolkit=Toolkit(root="/cuda", version="13.0"),
        host_compiler=HostCompiler(kind="gcc", version="13", path="/usr/bin/g++"),
        artifacts=(Artifact(path=f"../topmod{EXT}", kind="module"),),
        exports=("topmod.block_size",), top_level=("topmod",))
    fields.update(over)
    return Manifest(**fields).dump().encode()  # type: ignore[arg-type]


def _installed(tmp_path: Path) -> Path:
    """A site folder as pip leaves flashbuild's wheel of a package-less tree."""
    site = tmp_path / "site"
    info = site / "topmod-0.1.dist-info"
    info.mkdir(parents=True)
    shutil.copy(V / "sass_ptx_sm120.o", site / f"topmod{EXT}")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: topmod\nVersion: 0.1\n")
    (info / "top_level.txt").write_text("topmod\n")
    (info / "flashbuild-manifest.json").write_bytes(_manifest())
    (info / "RECORD").write_text(f"topmod{EXT},,\ntopmod-0.1.dist-info/METADATA,,\n"
                                 "topmod-0.1.dist-info/flashbuild-manifest.json,,\n")
    return site


def test_verify_reads_the_manifest_of_a_package_less_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(_installed(tmp_path)))
    with open_subject(package="topmod") as subject:
        assert subject.manifest is not None and subject.manifest.top_level == ("topmod",)
        assert subject.package == "topmod"
        assert [b.subject for b in subject.binaries] == [f"topmod{EXT}"]
        assert subject.binaries[0].required
    runner = ReplayRunner()
    runner.add("ldconfig", "-p", out=(V / "ldconfig-p.txt").read_text())
    probe = ('FLASHBUILD-PROBE {"imported": true, "missing": [], "error": null, '
             '"file": "/site/topmod.so", "torch": true, "torch_first": true}')
    runner.add("python", out=probe)
    report = verify_install(package="topmod", runner=runner, platform=get("linux"),
                            env={"PATH": "/usr/bin"}, python="python", run_gpu=False,
                            preloaded_dirs=())
    assert report.targets == "120-real"  # the manifest's archs
    child = next(c for c in runner.calls if c[0] == "python")
    # The export is the top-level module's: the child is told which modules are top level.
    assert child[-2:] == ('["topmod"]', "topmod.block_size")
    imported = next(c for c in report.checks if c.area == "import")
    assert imported.status is Status.OK and "after `import torch`" in imported.summary


def test_a_wheel_of_top_level_modules_is_read_with_its_manifest(tmp_path: Path) -> None:
    wheel = tmp_path / "topmod-0.1-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(V / "sass_ptx_sm120.o", f"topmod{EXT}")
        zf.writestr("topmod-0.1.dist-info/WHEEL", "Wheel-Version: 1.0\n")
        zf.writestr("topmod-0.1.dist-info/flashbuild-manifest.json", _manifest())
    runner = ReplayRunner()
    runner.add("ldconfig", "-p", out=(V / "ldconfig-p.txt").read_text())
    report = verify_install(path=wheel, targets=parse_arch_spec("sm_120"), runner=runner,
                            platform=get("linux"), env={"PATH": "/usr/bin"}, run_gpu=False,
                            preloaded_dirs=())
    assert [b.subject for b in report.binaries] == [f"topmod{EXT}"]
    assert not any("outside the wheel" in c.summary for c in report.checks)
    # causal-conv1d's shape: the package's manifest names the module beside the package.
    causal = tmp_path / "causal-0.1-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(causal, "w") as zf:
        zf.write(V / "sass_ptx_sm120.o", f"topmod{EXT}")
        zf.writestr("causal/__init__.py", "")
        zf.writestr("causal/flashbuild-manifest.json", _manifest())
        zf.writestr("causal-0.1.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    report = verify_install(path=causal, targets=parse_arch_spec("sm_120"), runner=runner,
                            platform=get("linux"), env={"PATH": "/usr/bin"}, run_gpu=False,
                            preloaded_dirs=())
    assert [b.subject for b in report.binaries] == [f"topmod{EXT}"]
    # A path that leaves the wheel is still refused.
    bad = tmp_path / "bad-0.1-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.write(V / "sass_ptx_sm120.o", f"topmod{EXT}")
        zf.writestr("bad-0.1.dist-info/WHEEL", "Wheel-Version: 1.0\n")
        zf.writestr("bad-0.1.dist-info/flashbuild-manifest.json", _manifest(
            artifacts=(__import__("flashbuild.installing.manifest", fromlist=["Artifact"])
                       .Artifact(path=f"../../topmod{EXT}", kind="module"),)))
    with pytest.raises(VerifyError):
        verify_install(path=bad, runner=runner, platform=get("linux"),
                       env={"PATH": "/usr/bin"}, run_gpu=False, preloaded_dirs=())


def test_a_manifest_top_level_entry_must_be_a_module_name(tmp_path: Path) -> None:
    path = tmp_path / "flashbuild-manifest.json"
    path.write_bytes(_manifest(top_level=("topmod; rm",)))
    with pytest.raises(VerifyError, match="is not a module name"):
        Manifest.load(path)


def test_a_package_of_shared_libraries_has_no_exports_to_check(tmp_path: Path) -> None:
    from flashbuild.installing.manifest import Artifact

    pkg = tmp_path / "ctlib"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    shutil.copy(V / "sass_sm90a.o", pkg / "libctlib_cuda.so")
    (pkg / "flashbuild-manifest.json").write_bytes(_manifest(
        archs=("sm_90a",), artifacts=(Artifact(path="libctlib_cuda.so", kind="plugin"),),
        exports=(), top_level=()))
    runner = ReplayRunner()
    runner.add("ldconfig", "-p", out=(V / "ldconfig-p.txt").read_text())
    runner.add("python", out='FLASHBUILD-PROBE {"imported": true, "missing": [], "error": '
               'null, "file": "/x/ctlib/__init__.py", "torch": false}')
    report = verify_install(path=pkg, runner=runner, platform=get("linux"),
                            env={"PATH": "/usr/bin"}, python="python", run_gpu=False,
                            preloaded_dirs=())
    exports = next(c for c in report.checks if c.area == "exports")
    assert exports.status is Status.SKIP
    assert exports.summary == ("no Python exports to check: libctlib_cuda.so is a shared "
                               "library the package loads itself (ctypes), not an extension "
                               "module")


@pytest.mark.parametrize(("path", "ok"), [
    ("../lib/libggml-base.so", True),   # llama-cpp-python's wheel: site-packages/lib/
    (f"../topmod{EXT}", True),
    ("lib/libggml.so", True),
    ("../../x.so", False), ("../lib/../../x.so", False), ("/abs/x.so", False),
])
def test_a_manifest_names_files_of_its_site_packages_and_nothing_beyond(
        tmp_path: Path, path: str, ok: bool) -> None:
    from flashbuild.installing.manifest import Artifact

    target = tmp_path / "flashbuild-manifest.json"
    target.write_bytes(_manifest(artifacts=(Artifact(path=path, kind="plugin"),)))
    if ok:
        assert Manifest.load(target).artifacts[0].path == path
    else:
        with pytest.raises(VerifyError, match="leaves the package folder"):
            Manifest.load(target)
