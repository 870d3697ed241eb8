"""scikit-build-core trees: reading `[tool.scikit-build]` (source/skbuild_settings.py), the
config settings and environment the skbuild backend passes to pip, the build requirements it
checks, the wheel's binaries it hands on, and the draft it makes (building/backends/skbuild.py,
scanning/draft_skbuild.py). The real build of the fixture tree is
tests/integration/test_build_skbuild.py."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from packaging.requirements import Requirement

from flashbuild import platforms
from flashbuild.arch import parse_arch_spec
from flashbuild.building.backends import backend_for, detect_backend, skbuild
from flashbuild.errors import BuildError, ToolchainError, TreeError, UsageError
from flashbuild.recipes.load import parse_recipe
from flashbuild.scanning import draft_skbuild
from flashbuild.scanning.draft import (
    BuildDraft,
    BuildTodo,
    DraftArtifact,
    _render_build,
    _toml,
)
from flashbuild.source.skbuild_settings import Host, is_skbuild, read_settings
from tests.unit.pip_fakes import PipWorld

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "skbuild" / "skcuda"
LINUX = Host(platform_system="linux", platform_machine="x86_64", python_version="3.11",
             implementation_name="cpython", env={})
PYPROJECT = """[build-system]
requires = ["scikit-build-core>=0.10", "nanobind>=2; python_version>='3.8'"]
build-backend = "scikit_build_core.build"

[project]
name = "My-Lib"
version = "1.2"
"""


def _tree(tmp_path: Path, extra: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT + extra, encoding="utf-8")
    return tmp_path


# --- reading [tool.scikit-build] ----------------------------------------------------------

def test_the_fixture_settings_are_read_typed() -> None:
    s = read_settings(FIXTURE, LINUX)
    assert (s.project, s.version) == ("skcuda", "0.1.0")
    assert s.source_dir == "native"
    # A boolean define is what scikit-build-core hands CMake: TRUE/FALSE.
    assert s.defines == {"MYLIB_BACKEND": "cuda", "MYLIB_WITH_CHECKS": "TRUE"}
    assert s.wheel_packages == ("python/skcuda",) and s.package_names() == ("skcuda",)
    assert (s.py_api, s.build_dir, s.build_type) == ("cp39", "build/{wheel_tag}", "Release")
    assert [r.name for r in s.requires] == ["scikit-build-core"]
    assert s.overrides == () and s.unsupported == ()


def test_an_override_applies_only_where_its_condition_holds() -> None:
    windows = Host(platform_system="win32", platform_machine="AMD64", python_version="3.11",
                   implementation_name="cpython", env={})
    s = read_settings(FIXTURE, windows)
    assert s.defines["MYLIB_WINDOWS"] == "ON"
    assert s.defines["MYLIB_BACKEND"] == "cuda"  # the override adds, it does not replace
    assert s.overrides == ("overrides[0] (if platform-system = '^win32')",)
    # `inherit.cmake.define = "append"`: without it the override's table replaces the whole
    # define table, as in scikit-build-core.
    assert "MYLIB_WINDOWS" not in read_settings(FIXTURE, LINUX).defines


def test_define_forms_args_targets_and_the_default_package(tmp_path: Path) -> None:
    tree = _tree(tmp_path, """
[tool.scikit-build]
cmake.args = ["-GNinja", "-DFOO=1"]
build.targets = ["_core"]
wheel.install-dir = "mylib"

[tool.scikit-build.cmake.define]
LIST = ["80", "90"]
FROM_ENV = { env = "MYLIB_ARCH", default = "native" }
OFF_FLAG = false
""")
    s = read_settings(tree, LINUX)
    assert s.defines == {"LIST": "80;90", "FROM_ENV": "native", "OFF_FLAG": "FALSE"}
    assert s.args == ("-GNinja", "-DFOO=1") and s.targets == ("_core",)
    assert s.install_dir == "mylib" and s.source_dir == "."
    assert s.wheel_packages is None and s.package_names() == ("my_lib",)
    with_env = Host(platform_system="linux", env={"MYLIB_ARCH": "90a"})
    assert read_settings(tree, with_env).defines["FROM_ENV"] == "90a"


def test_inherit_append_env_conditions_and_unknown_conditions(tmp_path: Path) -> None:
    tree = _tree(tmp_path, """
[tool.scikit-build]
cmake.args = ["-DA=1"]

[[tool.scikit-build.overrides]]
if.env.MYLIB_CUDA = true
inherit.cmake.args = "append"
cmake.args = ["-DB=2"]

[[tool.scikit-build.overrides]]
if.python-version = ">=3.10"
if.platform-machine = "x86_64"
cmake.define.NEW_PY = "1"

[[tool.scikit-build.overrides]]
if.from-sdist = true
cmake.define.SDIST = "1"
""")
    plain = read_settings(tree, LINUX)
    assert plain.args == ("-DA=1",)
    assert plain.defines == {"NEW_PY": "1"}
    # A condition flashbuild does not evaluate counts as false, and is said.
    assert plain.unsupported == ("overrides[2]: condition(s) from-sdist not evaluated by "
                                 "flashbuild (taken as false)",)
    on = read_settings(tree, Host(platform_system="linux", platform_machine="x86_64",
                                  python_version="3.9", env={"MYLIB_CUDA": "1"}))
    assert on.args == ("-DA=1", "-DB=2") and "NEW_PY" not in on.defines


def test_detection_and_errors(tmp_path: Path) -> None:
    assert is_skbuild(FIXTURE) and detect_backend(FIXTURE) == "skbuild"
    other = tmp_path / "other"
    other.mkdir()
    (other / "pyproject.toml").write_text(
        '[build-system]\nbuild-backend = "setuptools.build_meta"\n', encoding="utf-8")
    (other / "CMakeLists.txt").write_text("project(x)\n", encoding="utf-8")
    assert not is_skbuild(other) and detect_backend(other) == "cmake"
    with pytest.raises(TreeError, match="not a scikit-build-core project"):
        read_settings(other)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "pyproject.toml").write_text("[build-system\n", encoding="utf-8")
    assert not is_skbuild(broken)


def test_a_skbuild_recipe_on_another_tree_is_refused_with_the_backend_it_needs(
        tmp_path: Path) -> None:
    recipe = parse_recipe('[recipe]\nname = "t"\n[build]\nbackend = "skbuild"\n',
                          tmp_path / "r.toml")
    (tmp_path / "CMakeLists.txt").write_text("project(x)\n", encoding="utf-8")
    with pytest.raises(UsageError) as err:
        backend_for(recipe, tmp_path)  # type: ignore[arg-type]
    assert 'backend = "cmake"' in err.value.fix
    assert backend_for(recipe, FIXTURE).name == "skbuild"  # type: ignore[arg-type]


# --- what flashbuild passes -----------------------------------------------------------------

def _request(tmp_path: Path, *, launcher_cuda: bool = True, windows: bool = False,
             ) -> SimpleNamespace:
    recipe = parse_recipe('[recipe]\nname = "t"\n[build]\nbackend = "skbuild"\n',
                          tmp_path / "r.toml")
    return SimpleNamespace(
        recipe=recipe, source_dir=FIXTURE, env={"PATH": "/usr/bin"},
        cmake_toolkit_root=tmp_path / "cuda", toolkit=SimpleNamespace(root=tmp_path / "cuda"),
        arch=parse_arch_spec("sm_90"), platform=platforms.get("linux"),
        cuda_flags=("-Xcompiler=/Zc:preprocessor",) if windows else (),
        cxx_flags=("/Zc:preprocessor",) if windows else (),
        cmake_defines={"MYLIB_EXTRA": "1"}, cmake_args=("-DFROM_ARGS:STRING=x", "--trace"),
        exclude_var=None, build_env={"MYLIB_ENV": "1"}, python="python")


def test_config_settings_carry_arch_toolkit_launcher_and_build_dir(tmp_path: Path) -> None:
    request = _request(tmp_path)
    tools = SimpleNamespace(cmake=tmp_path / "bin" / "cmake", ninja=tmp_path / "bin" / "ninja")
    launcher = SimpleNamespace(name="sccache", path=Path("/opt/sccache"), cuda=True)
    settings = read_settings(FIXTURE, LINUX)
    defines = skbuild.build_defines(request, settings, tools=tools,  # type: ignore[arg-type]
                                    nvcc=tmp_path / "cuda" / "bin" / "nvcc",
                                    launcher=launcher)  # type: ignore[arg-type]
    cuda = (tmp_path / "cuda").as_posix()
    options = skbuild.config_settings(defines, tmp_path / "b" / "skbuild")
    # The spelling is scikit-build-core's: `-Ccmake.define.NAME=VALUE`, `-Cbuild-dir=PATH`
    # (its docs/configuration.md).
    assert "-Ccmake.define.CMAKE_CUDA_ARCHITECTURES=90-real" in options
    assert f"-Ccmake.define.CMAKE_CUDA_COMPILER={cuda}/bin/nvcc" in options
    assert f"-Ccmake.define.CUDAToolkit_ROOT={cuda}" in options
    assert "-Ccmake.define.CMAKE_CUDA_COMPILER_LAUNCHER=/opt/sccache" in options
    assert "-Ccmake.define.CMAKE_CXX_COMPILER_LAUNCHER=/opt/sccache" in options
    assert f"-Ccmake.define.CMAKE_MAKE_PROGRAM={(tmp_path / 'bin' / 'ninja').as_posix()}" \
        in options
    assert "-Ccmake.define.MYLIB_EXTRA=1" in options  # the recipe's [[build.options]]
    assert "-Ccmake.define.FROM_ARGS=x" in options  # a recipe's -D argument, as a define
    assert options[-1] == f"-Cbuild-dir={(tmp_path / 'b' / 'skbuild').as_posix()}"
    # The pyproject's own defines are not repeated: scikit-build-core reads them itself.
    assert not any("MYLIB_BACKEND" in o for o in options)
    argv = skbuild.pip_argv("python", options, tmp_path / "dist")
    assert argv[:4] == ["python", "-m", "pip", "wheel"] and "--no-build-isolation" in argv
    assert argv[-1] == "."


def test_a_launcher_that_skips_nvcc_and_flags_after_the_pyprojects(tmp_path: Path) -> None:
    request = _request(tmp_path, windows=True)
    tools = SimpleNamespace(cmake=tmp_path / "cmake", ninja=tmp_path / "ninja")
    settings = read_settings(FIXTURE, LINUX)
    settings = type(settings)(**{**settings.__dict__,
                                 "defines": {"CMAKE_CXX_FLAGS": "/W3"}})
    defines = skbuild.build_defines(
        request, settings, tools=tools, nvcc=tmp_path / "nvcc",  # type: ignore[arg-type]
        launcher=SimpleNamespace(name="ccache", path=Path("/c"), cuda=False))  # type: ignore[arg-type]
    assert "CMAKE_CUDA_COMPILER_LAUNCHER" not in defines
    assert defines["CMAKE_CXX_FLAGS"] == "/W3 /Zc:preprocessor"
    assert defines["CMAKE_CUDA_FLAGS"] == "-Xcompiler=/Zc:preprocessor"


def test_the_environment_names_the_toolkit_generator_and_jobs(tmp_path: Path) -> None:
    request = _request(tmp_path)
    env = skbuild.build_environment(request, tmp_path,  # type: ignore[arg-type]
                                    nvcc=tmp_path / "cuda" / "bin" / "nvcc", jobs=3)
    assert env["PATH"].startswith(str(tmp_path / "cuda" / "bin"))
    assert env["CUDACXX"].endswith("nvcc") and env["CUDA_HOME"] == str(tmp_path / "cuda")
    assert (env["CMAKE_GENERATOR"], env["CMAKE_BUILD_PARALLEL_LEVEL"]) == ("Ninja", "3")
    assert env["MYLIB_ENV"] == "1"


def _lines(requires: list[Requirement], installed: dict[str, str], *,
           tools: bool = False) -> list[str]:
    return [line for _, line in skbuild.unmet_requirements(requires, installed, tools=tools)]


def test_missing_build_requirements_are_named() -> None:
    reqs = [Requirement("scikit-build-core>=0.10"), Requirement("nanobind>=2"),
            Requirement("cmake>=3.26"), Requirement("never; python_version < '3'")]
    problems = _lines(reqs, {"scikit-build-core": "0.9.1", "cmake": "4.4.5"})
    assert problems == ["scikit-build-core 0.9.1 is installed, scikit-build-core>=0.10 is "
                        "required", "nanobind>=2 is not installed"]
    # CMake and Ninja found as programs stand for their PyPI packages (scikit-build-core
    # uses either); a too-old installed package is still named.
    reqs = [Requirement("ninja"), Requirement("cmake>=5")]
    assert _lines(reqs, {"cmake": "4.4.5"}, tools=True) == [
        "cmake 4.4.5 is installed, cmake>=5 is required"]
    assert _lines(reqs, {}, tools=False) == [
        "ninja is not installed", "cmake>=5 is not installed"]


def test_introspection_configures_with_the_pyprojects_settings(tmp_path: Path) -> None:
    defines = skbuild.introspection_defines(read_settings(FIXTURE, LINUX), tmp_path)
    assert defines["MYLIB_BACKEND"] == "cuda"  # the CUDA build, not the CMake default `cpu`
    assert defines["SKBUILD"] == "2" and defines["SKBUILD_PROJECT_NAME"] == "skcuda"
    assert defines["SKBUILD_SABI_COMPONENT"] == "Development.SABIModule"
    assert defines["SKBUILD_SOABI"] == "abi3" and defines["SKBUILD_SABI_VERSION"] == "3.9"
    assert defines["SKBUILD_PLATLIB_DIR"].startswith(tmp_path.as_posix())


# --- what it hands on -------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "expected"), [
    ("_skcuda.abi3.so", ("module", "_skcuda")),
    ("_C.cpython-311-x86_64-linux-gnu.so", ("module", "_C")),
    ("_C.cp311-win_amd64.pyd", ("module", "_C")),
    ("libmylib_cuda.so", ("plugin", "mylib_cuda")),
    ("libmylib.so.1.2", ("plugin", "mylib")),
    ("mylib_cuda.dll", ("plugin", "mylib_cuda")),
    ("__init__.py", None), ("data.bin", None),
])
def test_the_wheels_binaries_are_classified(name: str, expected: object) -> None:
    assert skbuild.classify(name) == expected


def test_wheel_artifacts_keep_their_paths_and_refuse_an_empty_wheel(tmp_path: Path) -> None:
    wheel = tmp_path / "skcuda-0.1.0-cp39-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("skcuda/__init__.py", "")
        zf.writestr("skcuda/_skcuda.abi3.so", b"\x7fELF")
        zf.writestr("skcuda/lib/libhelper.so", b"\x7fELF")
        zf.writestr("skcuda-0.1.0.dist-info/RECORD", "")
    found = skbuild.wheel_artifacts(wheel, tmp_path / "out", tmp_path / "log")
    assert [(a.kind, a.name, a.relpath) for a in found] == [
        ("module", "skcuda._skcuda", "skcuda/_skcuda.abi3.so"),
        ("plugin", "helper", "skcuda/lib/libhelper.so")]
    assert (tmp_path / "out" / "skcuda" / "_skcuda.abi3.so").is_file()
    empty = tmp_path / "e-0.1-py3-none-any.whl"
    with zipfile.ZipFile(empty, "w") as zf:
        zf.writestr("e/__init__.py", "")
    with pytest.raises(BuildError, match="without any extension module"):
        skbuild.wheel_artifacts(empty, tmp_path / "out2", tmp_path / "log")


# --- the draft ----------------------------------------------------------------------------------

def test_the_draft_is_a_skbuild_build_with_the_package_wheel_packages_names(
        tmp_path: Path) -> None:
    tree = tmp_path / "t"
    shutil.copytree(FIXTURE, tree)
    skb = draft_skbuild.settings_of(tree)
    assert skb is not None and draft_skbuild.top_cmakelists(tree, skb) == "native/CMakeLists.txt"
    # The static reading found no __init__.py importing a module (llama-cpp-python loads its
    # libraries with ctypes): the package wheel.packages names answers that TODO.
    b = BuildDraft(cmake_source="native", todos=[BuildTodo(
        table="install", what="no CMake module target, and no package imports an extension "
        "module", evidence="searched every __init__.py of the tree", fix="add [install]")])
    b.artifacts.append(DraftArtifact(name="_skcuda", kind="module", target="_skcuda",
                                     where="native/CMakeLists.txt:17"))
    draft_skbuild.as_skbuild(b, skb)
    assert (b.backend, b.package, b.package_dir) == ("skbuild", "skcuda", "python/skcuda")
    assert b.todos == []
    text = "\n".join(_render_build(b))
    assert '[build]\nbackend = "skbuild"\n' in text
    assert "targets" not in text and "[[artifact]]" not in text
    assert "cmake.define MYLIB_BACKEND=cuda, MYLIB_WITH_CHECKS=TRUE" in text
    assert '[install]\npackage = "skcuda"\npackage_dir = "python/skcuda"' in text
    parse_recipe(f'[recipe]\nname = "t"\n{text}', tmp_path / "r.toml")  # it loads
    assert _toml("x") == '"x"'
    assert draft_skbuild.settings_of(tmp_path) is None


def test_inplace_installs_are_refused_before_anything_runs(tmp_path: Path) -> None:
    request = SimpleNamespace(install="inplace", source_dir=FIXTURE, python="python")
    with pytest.raises(UsageError, match="--install inplace is not supported"):
        skbuild.SkbuildBackend().preflight(request, runner=None)  # type: ignore[arg-type]


def test_a_scan_introspects_a_scikit_build_core_tree_with_its_backend() -> None:
    from flashbuild.pipeline.scan import recipe_for_scan

    recipe = recipe_for_scan(FIXTURE)
    assert recipe is not None and recipe.build.backend == "skbuild"


def test_the_arch_gate_stops_the_build_once_cmake_has_written_build_ninja() -> None:
    seen: list[str] = []

    class Runner:
        def stream(self, argv: object, *, on_line: object, **_kw: object) -> int:
            for line in ["-- Configuring done", "-- Build files have been written to: /b",
                         "[1/3] Building CUDA object a.cu.o"]:
                on_line(line)  # type: ignore[operator]
            return 0

    def refuse() -> None:
        raise BuildError("the build does not compile for --arch sm_90")

    gate = skbuild.ArchGate(Runner(), refuse)  # type: ignore[arg-type]
    with pytest.raises(BuildError, match="does not compile for --arch"):
        gate.stream(["pip"], on_line=seen.append)
    # Checked right after configure: the compile line never came (proc.stream ends the tree).
    assert gate.checked and seen[-1].startswith("-- Build files have been written to")
    passing = skbuild.ArchGate(Runner(), lambda: None)  # type: ignore[arg-type]
    assert passing.stream(["pip"], on_line=seen.append) == 0 and passing.checked


def test_an_unchanged_rerun_is_recognised_and_a_changed_file_is_not(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    shutil.copytree(FIXTURE, tree)
    folder = tmp_path / "b"
    folder.mkdir()
    request = SimpleNamespace(platform=platforms.get("linux"), build_env={"MYLIB_ENV": "1"})
    argv = ["python", "-m", "pip", "wheel", "-Ccmake.define.CMAKE_CUDA_ARCHITECTURES=90-real"]
    env = {"PATH": "/usr/bin", "HOME": "/root", "CMAKE_BUILD_PARALLEL_LEVEL": "2"}
    digest = skbuild._digest(argv, env, tree, request)  # type: ignore[arg-type]
    assert skbuild._unchanged(folder, digest) is None  # no stamp yet
    module = folder / "out" / "skcuda" / "_skcuda.abi3.so"
    module.parent.mkdir(parents=True)
    module.write_bytes(b"\x7fELF")
    wheel = folder / "skcuda-0.1.0-cp39-abi3-linux_x86_64.whl"
    wheel.write_bytes(b"PK")
    built = (skbuild.BuiltArtifact(module, "module", "skcuda._skcuda",
                                   relpath="skcuda/_skcuda.abi3.so"),)
    skbuild._write_stamp(folder, digest, wheel, built)
    assert skbuild._unchanged(folder, digest) == (wheel, built)
    # HOME does not reach the build; the jobs, the arch and a source file do.
    assert skbuild._digest(argv, {**env, "HOME": "/x"}, tree, request) == digest  # type: ignore[arg-type]
    assert skbuild._digest(argv, {**env, "CMAKE_BUILD_PARALLEL_LEVEL": "4"}, tree,
                           request) != digest  # type: ignore[arg-type]
    assert skbuild._digest([*argv[:-1], "-Ccmake.define.CMAKE_CUDA_ARCHITECTURES=120-real"],
                           env, tree, request) != digest  # type: ignore[arg-type]
    (tree / "native" / "src" / "scale.cu").write_text("// changed\n", encoding="utf-8")
    assert skbuild._digest(argv, env, tree, request) != digest  # type: ignore[arg-type]
    module.unlink()
    assert skbuild._unchanged(folder, digest) is None  # an artifact gone: build again


def test_a_toolkit_component_the_configure_lacks_is_named_with_its_install(
        tmp_path: Path) -> None:
    """Here (llama-cpp-python 0.3.36, GGML_CUDA=ON, the cuda extra's toolkit without cuBLAS):
    scikit-build-core's configure stops where ggml-cuda links CUDA::cublas. The paragraph is
    the CMake backend's, with the install, not "fix the first error"."""
    from packaging.version import Version

    from flashbuild.building import cmake

    output = ('CMake Error at vendor/llama.cpp/ggml/src/ggml-cuda/CMakeLists.txt:178 '
              '(target_link_libraries):\n  Target "ggml-cuda" links to:\n\n    CUDA::cublas\n\n'
              '  but the target was not found.  Possible reasons include:\n')
    root = tmp_path / "site-packages" / "nvidia" / "cu13"
    request = SimpleNamespace(
        toolkit=SimpleNamespace(root=root, release=Version("13.0.88"), layout="pypi"),
        pypi_home=root, python="/venv/bin/python")
    err = cmake.missing_components_error(output, request, tmp_path / "build.log")  # type: ignore[arg-type]
    assert err is not None
    assert err.what.endswith(f"links CUDA::cublas, which the toolkit at {root} does not have")
    assert 'cublas]==13.0.*"' in err.fix and "/venv/bin/python -m pip install" in err.fix
    assert cmake.missing_components_error("CMake Error: something else", request,  # type: ignore[arg-type]
                                          tmp_path / "build.log") is None
    # ggml-cuda links the driver too (VMM): the PyPI wheels ship no libcuda stub, and no pip
    # extra gives one.
    driver = output.replace("CUDA::cublas", "CUDA::cuda_driver")
    err = cmake.missing_components_error(driver, request, tmp_path / "build.log")  # type: ignore[arg-type]
    assert err is not None and "lib64/stubs" in err.fix and "pip install" not in err.fix


def _preflight(world: PipWorld, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *,
               install_requirements: bool = True) -> tuple[str, ...]:
    monkeypatch.setattr(skbuild, "_tools_found", lambda request, runner: True)
    request = SimpleNamespace(install="wheel", source_dir=FIXTURE, python="python",
                              env={"XDG_CACHE_HOME": str(tmp_path)},
                              platform=platforms.get("linux"),
                              install_requirements=install_requirements)
    return skbuild.SkbuildBackend().preflight(request, world)  # type: ignore[arg-type]


def test_a_missing_build_requirement_is_installed_with_everything_pinned(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """llama-cpp-python's first stop: scikit-build-core, declared and not installed, with
    the build run without isolation. It is installed as isolation would have, into this
    environment, with torch and the rest pinned by a constraints file."""
    world = PipWorld({"torch": "2.11.0", "pybind11": "3.1.0"})
    (note,) = _preflight(world, monkeypatch, tmp_path)
    assert note.startswith("installed the build requirements scikit-build-core")
    (install,) = world.installs()
    assert install == ["scikit-build-core>=0.10"]
    assert world.installed["torch"] == "2.11.0"


def test_a_build_requirement_pip_refuses_stops_with_the_command(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    world = PipWorld({"torch": "2.11.0", "pybind11": "3.1.0"}, refuse=True)
    with pytest.raises(ToolchainError) as caught:
        _preflight(world, monkeypatch, tmp_path)
    assert "pip could not install them with everything installed pinned" in \
        caught.value.evidence
    assert "conflicting dependencies" in caught.value.evidence
    assert caught.value.fix.startswith("`python -m pip install ")


def test_no_deps_only_names_the_build_requirement(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    world = PipWorld({"torch": "2.11.0", "pybind11": "3.1.0"})
    with pytest.raises(ToolchainError, match="not all installed") as caught:
        _preflight(world, monkeypatch, tmp_path, install_requirements=False)
    assert "(--no-deps)" in caught.value.evidence
    assert world.installs() == []
