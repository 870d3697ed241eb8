"""Build backends: choosing one for a tree, the setuptools environment, the build hook's
arch-flag rewriting, the arch check read from generated Ninja files, wheel re-packing."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import zipfile
from base64 import urlsafe_b64encode
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
from packaging.version import Version

from flashbuild import platforms
from flashbuild.arch import parse_arch_spec
from flashbuild.building import archcheck
from flashbuild.building.backends import backend_for, detect_backend, setuptools
from flashbuild.errors import BuildError, RecipeError, ToolchainError, UsageError
from flashbuild.installing.wheel import repack_wheel
from flashbuild.pipeline.command import artifacts_for, recipe_settings
from flashbuild.recipes.load import parse_recipe
from flashbuild.recipes.when import WhenContext

SETUP_PY = """from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
setup(name="t", ext_modules=[CUDAExtension("t._C", ["a.cu"])],
      cmdclass={"build_ext": BuildExtension})
"""


def _hook() -> ModuleType:
    path = setuptools.HOOK_DIR / "sitecustomize.py"
    spec = importlib.util.spec_from_file_location("fb_hook_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _recipe(tmp_path: Path, body: str) -> object:
    return parse_recipe(f'[recipe]\nname = "t"\n{body}', tmp_path / "r.toml")


# --- which backend ------------------------------------------------------------------------

def test_detect_backend_reads_the_tree(tmp_path: Path) -> None:
    assert detect_backend(tmp_path) is None
    (tmp_path / "CMakeLists.txt").write_text("project(x)\n")
    assert detect_backend(tmp_path) == "cmake"
    (tmp_path / "setup.py").write_text(SETUP_PY)
    # A tree with both is built by the setup.py that compiles the CUDA extension.
    assert detect_backend(tmp_path) == "setuptools"


def test_a_cmake_recipe_on_a_setup_py_tree_says_what_the_tree_is(tmp_path: Path) -> None:
    (tmp_path / "setup.py").write_text(SETUP_PY)
    recipe = _recipe(tmp_path, "")
    with pytest.raises(UsageError) as err:
        backend_for(recipe, tmp_path)  # type: ignore[arg-type]
    text = str(err.value) + err.value.evidence + err.value.fix
    assert "CMakeLists.txt" in text
    assert 'backend = "setuptools"' in err.value.fix
    assert "torch.utils.cpp_extension" in err.value.evidence


def test_a_tree_with_neither_is_a_clear_error(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, '[build]\nbackend = "setuptools"\n')
    with pytest.raises(UsageError) as err:
        backend_for(recipe, tmp_path)  # type: ignore[arg-type]
    assert "neither a CMakeLists.txt nor a setup.py" in err.value.evidence
    assert err.value.exit_code == 2


def test_cmake_backend_needs_a_target_per_artifact(tmp_path: Path) -> None:
    (tmp_path / "CMakeLists.txt").write_text("project(x)\n")
    recipe = _recipe(tmp_path, '[[artifact]]\nname = "_C"\nkind = "module"\n')
    with pytest.raises(UsageError, match="no CMake target"):
        backend_for(recipe, tmp_path)  # type: ignore[arg-type]


# --- recipe settings: placeholders ------------------------------------------------------

def test_placeholders_render_the_arch_in_each_form(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, """
[[build.options]]
define = { GPU_ARCH = "{arch_numbers}", ARCHS = "{cmake_archs}" }
[[build.env]]
set = { FLASH_ATTN_CUDA_ARCHS = "{arch_codes}", LIST = "{torch_arch_list}" }
[[build.env]]
when = { platform = "windows" }
set = { ONLY_WINDOWS = "1" }
""")
    spec = parse_arch_spec("90a;120")
    ctx = WhenContext(platform="linux", arch=spec, cuda=Version("13.0"))
    defines, _args, env = recipe_settings(recipe, ctx, spec)  # type: ignore[arg-type]
    assert defines == {"GPU_ARCH": "90;120", "ARCHS": "90a-real;120-real"}
    assert env == {"FLASH_ATTN_CUDA_ARCHS": "90a;120", "LIST": "9.0a;12.0"}


def test_an_artifact_whose_when_does_not_match_is_left_out_with_its_target(
        tmp_path: Path) -> None:
    # A CMake project that defines a target only for some archs (FlashRT's flash_vla_fa2):
    # asking ninja for it elsewhere stops the build, and looking for it fails the build.
    recipe = _recipe(tmp_path, """[build]
targets = ["core", "fa2"]
[[artifact]]
name = "core"
kind = "module"
target = "core"
[[artifact]]
name = "fa2"
kind = "module"
target = "fa2"
when = { arch = [">=120,<121"] }
""")
    for arch, names in (("sm_90a", ["core"]), ("sm120", ["core", "fa2"])):
        spec = parse_arch_spec(arch)
        ctx = WhenContext(platform="linux", arch=spec, cuda=Version("13.0"))
        chosen = artifacts_for(recipe, ctx)  # type: ignore[arg-type]
        assert [a.name for a in chosen.artifact] == names
        assert list(chosen.build.targets) == names
    from flashbuild.recipes.report import build_lines

    shown = build_lines(recipe)  # type: ignore[arg-type]
    assert "  artifact fa2 (module, CMake target fa2, only when arch=>=120,<121)" in shown


def test_an_unknown_placeholder_is_a_recipe_error_with_its_line(tmp_path: Path) -> None:
    with pytest.raises(RecipeError) as err:
        _recipe(tmp_path, '[[build.env]]\nset = { X = "{arch_nums}" }\n')
    assert "arch_nums" in str(err.value)
    assert "r.toml:" in str(err.value) + err.value.evidence


def test_family_targets_stay_family_in_gencode_and_base_in_torch_list() -> None:
    spec = parse_arch_spec("120f")
    assert spec.torch_informational() == "12.0"
    assert spec.gencode() == ["-gencode", "arch=compute_120f,code=sm_120f"]


# --- the setuptools environment ---------------------------------------------------------

def _request(tmp_path: Path, *, platform: str = "linux", arch: str = "sm_90a",
             cuda: str = "13.0") -> SimpleNamespace:
    recipe = _recipe(tmp_path, '[build]\nbackend = "setuptools"\n')
    return SimpleNamespace(
        env={"PATH": "/usr/bin", "HOME": "/root"}, recipe=recipe,
        cmake_toolkit_root=tmp_path / "cuda", toolkit=SimpleNamespace(
            root=tmp_path / "cuda", release=Version(cuda)),
        arch=parse_arch_spec(arch), platform=platforms.get(platform),
        cuda_flags=("-Xcompiler=/Zc:preprocessor",) if platform == "windows" else (),
        cxx_flags=("/Zc:preprocessor",) if platform == "windows" else (),
        build_env={"CAUSAL_CONV1D_FORCE_BUILD": "TRUE"}, python="python")


# ":" cannot be checked on Windows itself, where every path has one after the drive letter.
@pytest.mark.parametrize("pathsep", sorted({os.pathsep, ";"}))
def test_environment_points_torch_at_the_chosen_toolkit_and_arch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pathsep: str) -> None:
    # ";" is what the Windows runner joins with: the assertions must split the same way.
    monkeypatch.setattr(os, "pathsep", pathsep)
    (tmp_path / "setup.py").write_text(SETUP_PY)
    request = _request(tmp_path)
    env = setuptools.build_environment(request, tmp_path, jobs=3,  # type: ignore[arg-type]
                                       hook_report=tmp_path / "r", build_temp=None)
    root = str(tmp_path / "cuda")
    assert env["CUDA_HOME"] == env["CUDA_PATH"] == root
    # build_environment joins with os.pathsep (the machine that runs setup.py): `C:\...` on
    # Windows would split into "C" on ":".
    assert env["PATH"].split(os.pathsep)[0] == str(tmp_path / "cuda" / "bin")
    assert env["TORCH_CUDA_ARCH_LIST"] == "9.0a"
    assert env["MAX_JOBS"] == "3"
    assert json.loads(env["FLASHBUILD_GENCODE"]) == ["-gencode=arch=compute_90a,code=sm_90a"]
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(setuptools.HOOK_DIR)
    assert env["CAUSAL_CONV1D_FORCE_BUILD"] == "TRUE"
    assert "NVCC_THREADS" not in env  # this setup.py does not read it
    assert "DISTUTILS_USE_SDK" not in env


def test_windows_environment_uses_flashbuilds_msvc_and_its_flags(tmp_path: Path) -> None:
    (tmp_path / "setup.py").write_text(SETUP_PY + "\nos.getenv('NVCC_THREADS')\n")
    request = _request(tmp_path, platform="windows", arch="sm120")
    env = setuptools.build_environment(request, tmp_path, jobs=1,  # type: ignore[arg-type]
                                       hook_report=tmp_path / "r", build_temp=tmp_path / "t")
    assert env["DISTUTILS_USE_SDK"] == "1"
    nvcc = json.loads(env["FLASHBUILD_NVCC_FLAGS"])
    assert "-DUSE_CUDA" in nvcc and "-Xcompiler=/Zc:preprocessor" in nvcc
    assert json.loads(env["FLASHBUILD_CXX_FLAGS"]) == ["/Zc:preprocessor"]
    assert env["FLASHBUILD_BUILD_TEMP"] == str(tmp_path / "t")
    assert env["NVCC_THREADS"]


@pytest.mark.parametrize("temp", ["C:\\Users\\José\\AppData\\Local\\Temp",
                                  "C:\\Users\\Jane Doe\\AppData\\Local\\Temp"])
def test_windows_build_gets_an_ascii_temp_folder(tmp_path: Path, temp: str) -> None:
    # Issue 20: doctor warned about such a TEMP, but nvcc still got it (its intermediate files
    # go there and their paths to cl.exe).
    (tmp_path / "setup.py").write_text(SETUP_PY)
    request = _request(tmp_path, platform="windows", arch="sm120")
    request.env = {"Path": "C:\\Windows", "Temp": temp, "TMP": temp}
    folder = tmp_path / "build"
    env = setuptools.build_environment(request, tmp_path, jobs=1,  # type: ignore[arg-type]
                                       hook_report=tmp_path / "r", build_temp=None,
                                       folder=folder)
    assert env["Temp"] == env["TMP"] == str(folder / "tmp") and (folder / "tmp").is_dir()
    assert "TEMP" not in env  # one variable, in the spelling it came with
    plain = {"Temp": "C:\\Temp", "TMP": "C:\\Temp"}
    request.env = plain
    again = setuptools.build_environment(request, tmp_path, jobs=1,  # type: ignore[arg-type]
                                         hook_report=tmp_path / "r", build_temp=None,
                                         folder=folder)
    assert again["Temp"] == "C:\\Temp"  # a plain TEMP is kept
    linux = _request(tmp_path)
    linux.env = {"PATH": "/usr/bin", "TMPDIR": "/tmp/José", "TEMP": temp}
    on_linux = setuptools.build_environment(linux, tmp_path, jobs=1,  # type: ignore[arg-type]
                                            hook_report=tmp_path / "r", build_temp=None,
                                            folder=folder)
    assert on_linux["TEMP"] == temp


def test_cpu_torch_and_cuda_major_mismatch_are_refused(tmp_path: Path) -> None:
    request = _request(tmp_path, cuda="13.0")
    with pytest.raises(ToolchainError, match="CPU-only"):
        setuptools.check_torch_cuda({"version": "2.13.0+cpu", "cuda": ""},
                                    request)  # type: ignore[arg-type]
    with pytest.raises(ToolchainError) as err:
        setuptools.check_torch_cuda({"version": "2.7.0+cu126", "cuda": "12.6"},
                                    request)  # type: ignore[arg-type]
    assert "CUDA 12.6" in str(err.value) and "cu130" in err.value.fix
    setuptools.check_torch_cuda({"version": "2.11.0+cu130", "cuda": "13.0"},
                                request)  # type: ignore[arg-type]


# --- the build hook ---------------------------------------------------------------------

@pytest.mark.parametrize(("flags", "kept"), [
    (["-O3", "-gencode", "arch=compute_80,code=sm_80", "--threads", "4"],
     ["-O3", "--threads", "4"]),
    (["-gencode=arch=compute_86,code=sm_86", "-lineinfo"], ["-lineinfo"]),
    (["--generate-code", "arch=compute_90,code=[compute_90,sm_90]"], []),
    (["-arch=sm_89", "-code", "sm_89"], []),
    (["-gencode arch=compute_80,code=sm_80", "-DX"], ["-DX"]),
    (["--gpu-architecture", "sm_75", "-DARCHIVE"], ["-DARCHIVE"]),
])
def test_hook_strips_every_spelling_of_arch_flags(flags: list[str], kept: list[str]) -> None:
    hook = _hook()
    out, removed = hook.strip_arch_flags(flags)
    assert out == kept
    assert len(removed) + len(out) == len(flags)


@pytest.mark.parametrize(("flags", "need", "kept"), [
    (["-O3", "-std=c++17"], 2020, ["-O3"]),  # chamferdist 1.0.3 against torch >= 2.10
    (["-std=c++14", "--std=gnu++14", "/std:c++17", "-std=c++1z"], 2020, []),
    (["-std=c++20", "-std=c++2a", "-std=c++23"], 2020, ["-std=c++20", "-std=c++2a",
                                                       "-std=c++23"]),
    (["-std=c++17"], 2017, ["-std=c++17"]),
    (["-std=c++17"], None, ["-std=c++17"]),  # torch's requirement unknown: nothing removed
])
def test_hook_removes_a_cxx_standard_older_than_torchs_headers_need(
        flags: list[str], need: int | None, kept: list[str]) -> None:
    hook = _hook()
    out, removed = hook.strip_old_std(flags, need)
    assert out == kept
    assert sorted(removed + out) == sorted(flags)


def test_hook_reads_the_standard_torchs_headers_require(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hook = _hook()
    torch_dir = tmp_path / "torch"
    header = torch_dir / "include" / "torch" / "csrc" / "api" / "include" / "torch" / "all.h"
    header.parent.mkdir(parents=True)
    header.write_text("#if !defined(_MSC_VER) && __cplusplus < 202002L\n"
                      "#error C++20 or later compatible compiler is required to use PyTorch.\n"
                      "#endif\n", encoding="utf-8")
    monkeypatch.setitem(sys.modules, "torch",
                        SimpleNamespace(__file__=str(torch_dir / "__init__.py")))
    assert hook.torch_cplusplus() == 2020
    header.write_text("#pragma once\n", encoding="utf-8")
    assert hook.torch_cplusplus() is None


def test_hook_rewrites_cuda_extensions_only(monkeypatch: pytest.MonkeyPatch) -> None:
    hook = _hook()
    monkeypatch.setenv("FLASHBUILD_GENCODE", json.dumps(["-gencode=arch=compute_90a,code=sm_90a"]))
    monkeypatch.setenv("FLASHBUILD_NVCC_FLAGS", json.dumps(["-DUSE_CUDA"]))
    monkeypatch.setenv("FLASHBUILD_CXX_FLAGS", json.dumps(["/utf-8"]))
    cuda = SimpleNamespace(name="m._C", sources=["k.cu", "b.cpp"], extra_compile_args={
        "cxx": ["-O3"], "nvcc": ["-O3", "-gencode", "arch=compute_80,code=sm_80"]})
    listed = SimpleNamespace(name="m._D", sources=["k.cu"], extra_compile_args=["-O2"])
    record = hook._rewrite(cuda)
    assert cuda.extra_compile_args == {
        "cxx": ["-O3", "/utf-8"],
        "nvcc": ["-O3", "-gencode=arch=compute_90a,code=sm_90a", "-DUSE_CUDA"]}
    assert record["removed"] == ["-gencode", "arch=compute_80,code=sm_80"]
    hook._rewrite(listed)
    assert listed.extra_compile_args["nvcc"][-2:] == ["-gencode=arch=compute_90a,code=sm_90a",
                                                      "-DUSE_CUDA"]
    assert hook._has_cuda_sources(SimpleNamespace(sources=["a.cpp"])) is False


# --- arch check -------------------------------------------------------------------------

def test_arch_flags_from_cmake_and_torch_ninja_lines() -> None:
    cmake_line = ("  FLAGS = -O3 --generate-code=arch=compute_89,code=[compute_89,sm_89] "
                  "-Xcompiler=-fPIC")
    torch_line = "cuda_post_cflags = -O3 -gencode=arch=compute_90a,code=sm_90a --threads 4"
    flags = archcheck.read_arch_flags([cmake_line, torch_line, "cflags = -O2"])
    assert flags.sass == {"sm_89", "sm_90a"}
    assert flags.ptx == {"compute_89"}
    assert len(flags.lines) == 2
    assert archcheck.read_arch_flags(["-arch=native"]).wide == {"native"}


def test_a_project_that_chose_its_own_arch_is_an_error(tmp_path: Path) -> None:
    flags = archcheck.read_arch_flags(
        ["FLAGS = --generate-code=arch=compute_89,code=[compute_89,sm_89]"])
    with pytest.raises(BuildError) as err:
        archcheck.check(flags, parse_arch_spec("sm120"), where=tmp_path / "build.ninja",
                        fix="hand the arch over")
    assert "lacks sm_120" in str(err.value) and "also builds sm_89" in str(err.value)
    assert err.value.exit_code == 6
    ok = archcheck.read_arch_flags(["FLAGS = --generate-code=arch=compute_120,code=[sm_120]"])
    archcheck.check(ok, parse_arch_spec("sm120"), where=tmp_path, fix="")


# --- wheels -----------------------------------------------------------------------------

def test_a_repacked_wheel_gets_the_local_version_of_its_cuda_and_torch(tmp_path: Path) -> None:
    # Two CUDA builds of one version must differ by file name (release assets are one flat
    # list, issue 31); a local version the tree set itself is kept.
    from wheel.wheelfile import WheelFile

    src = tmp_path / "src" / "pkg-1.0-cp311-cp311-linux_x86_64.whl"
    src.parent.mkdir()
    with WheelFile(src, "w") as wf:
        wf.writestr("pkg/__init__.py", b"x = 1\n")
        wf.writestr("pkg-1.0.dist-info/METADATA", b"Name: pkg\nVersion: 1.0\n")
        wf.writestr("pkg-1.0.dist-info/WHEEL", b"Wheel-Version: 1.0\n")
    out = repack_wheel(src, package="pkg", extra={}, out_dir=tmp_path / "out",
                       extra_meta={"flashbuild.json": b"{}"}, local_version="cu130torch2.13")
    assert out.name == "pkg-1.0+cu130torch2.13-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(out) as zf:
        names = set(zf.namelist())
        assert b"Version: 1.0+cu130torch2.13\n" in zf.read(
            "pkg-1.0+cu130torch2.13.dist-info/METADATA")
    assert "pkg-1.0+cu130torch2.13.dist-info/flashbuild.json" in names
    assert not any(n.startswith("pkg-1.0.dist-info/") for n in names)
    tagged = src.with_name("pkg-1.0+mine-cp311-cp311-linux_x86_64.whl")
    with WheelFile(tagged, "w") as wf:
        wf.writestr("pkg-1.0+mine.dist-info/METADATA", b"Name: pkg\nVersion: 1.0+mine\n")
    kept = repack_wheel(tagged, package="pkg", extra={}, out_dir=tmp_path / "kept",
                        local_version="cu130torch2.13")
    assert kept.name == tagged.name


def test_repacked_wheel_has_a_record_that_matches_every_file(tmp_path: Path) -> None:
    from wheel.wheelfile import WheelFile

    src = tmp_path / "src" / "pkg-1.0-cp311-cp311-linux_x86_64.whl"
    src.parent.mkdir()
    with WheelFile(src, "w") as wf:
        wf.writestr("pkg/__init__.py", b"x = 1\n")
        wf.writestr("pkg_cuda.so", b"\x7fELF")
        wf.writestr("pkg-1.0.dist-info/METADATA", b"Name: pkg\nVersion: 1.0\n")
        wf.writestr("pkg-1.0.dist-info/WHEEL", b"Wheel-Version: 1.0\n")
    out = repack_wheel(src, package="pkg", extra={"__init__.py": b"# shim\nx = 1\n",
                                                  "_flashbuild_shim.py": b"pass\n"},
                       out_dir=tmp_path / "out")
    with zipfile.ZipFile(out) as zf:
        names = zf.namelist()
        record = zf.read("pkg-1.0.dist-info/RECORD").decode().splitlines()
        assert zf.read("pkg/__init__.py") == b"# shim\nx = 1\n"
        assert names.count("pkg/__init__.py") == 1
        for row in record:
            name, digest, _size = row.rsplit(",", 2)
            if not digest:
                continue
            algo, value = digest.split("=", 1)
            got = urlsafe_b64encode(hashlib.new(algo, zf.read(name)).digest()).rstrip(b"=")
            assert got.decode() == value, name
    assert {r.split(",")[0] for r in record} == set(names)


def test_noop_stamp_reads_path_with_windows_semantics(tmp_path: Path) -> None:
    # Issue 20: vcvarsall's environment spells it `Path`; the digest skipped it, so a changed
    # PATH (another CUDA, another MSVC) still looked like "nothing to do".
    (tmp_path / "setup.py").write_text(SETUP_PY)
    win = platforms.get("windows")

    def digest(env: dict[str, str]) -> str:
        return setuptools._digest(["python", "setup.py"], env, tmp_path, {}, win)

    assert digest({"Path": "C:\\CUDA\\v12.9\\bin"}) != digest({"Path": "C:\\CUDA\\v13.0\\bin"})
    assert digest({"Path": "C:\\CUDA\\v13.0\\bin"}) == digest({"PATH": "C:\\CUDA\\v13.0\\bin"})
    assert digest({"Include": "a"}) != digest({"Include": "b"})
    linux = platforms.get("linux")
    assert setuptools._digest(["p"], {"PATH": "/a"}, tmp_path, {}, linux) != \
        setuptools._digest(["p"], {"PATH": "/b"}, tmp_path, {}, linux)


def test_hook_computes_the_object_path_torch_writes_on_windows() -> None:
    import ntpath

    hook = _hook()
    got = hook.longest_object(["C:\\Users\\me\\src\\tree\\csrc\\k.cu",
                               "C:\\Users\\me\\src\\tree\\csrc\\deeper\\bind.cpp"],
                              "C:\\Users\\me\\build\\t", path=ntpath)
    assert got == "C:\\Users\\me\\build\\t\\Users\\me\\src\\tree\\csrc\\deeper\\bind.obj"


def _fake_cpp_extension(compiled: list[str]) -> SimpleNamespace:
    class BuildExtension:
        def build_extensions(self) -> None:
            compiled.append("compiled")

    return SimpleNamespace(CUDA_HOME="/cuda", BuildExtension=BuildExtension)


def test_hook_stops_before_compiling_when_an_object_path_is_too_long(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 20: nothing checked the longest object path; cl failed with C1083 deep in the
    # build. 260 is Windows' MAX_PATH (with its NUL), so 259 characters still work.
    hook = _hook()
    report = tmp_path / "hook.jsonl"
    monkeypatch.setenv("FLASHBUILD_HOOK_REPORT", str(report))
    monkeypatch.setenv("FLASHBUILD_GENCODE", "[]")
    monkeypatch.setenv("FLASHBUILD_PATH_LIMIT", "260")
    monkeypatch.delenv("FLASHBUILD_BUILD_TEMP", raising=False)
    compiled: list[str] = []
    module = _fake_cpp_extension(compiled)
    hook._patch(module)
    temp = tmp_path / "t"
    builder = module.BuildExtension()
    builder.build_temp = str(temp)
    ext = SimpleNamespace(name="m._C", sources=[], extra_compile_args={"nvcc": []})
    builder.extensions = [ext]

    def source(length: int) -> str:
        """A source whose object path (`<temp>/s/<name>.obj`) has `length` characters."""
        name = "n" * (length - len(str(temp)) - len("/s/") - len(".obj"))
        return f"/s/{name}.cu"

    ext.sources = ["/s/k.cu", source(259)]
    assert len(hook.longest_object(ext.sources, str(temp))) == 259
    builder.build_extensions()
    assert compiled == ["compiled"]
    ext.sources = ["/s/k.cu", source(260)]
    with pytest.raises(SystemExit, match="past the 260-character limit"):
        builder.build_extensions()
    assert compiled == ["compiled"]  # not a second time
    (hit,) = [r for r in setuptools.read_hook_report(report) if "too_long" in r]
    assert hit["limit"] == 260 and len(str(hit["too_long"])) == 260


def test_a_too_long_object_path_is_one_paragraph_naming_a_short_folder(tmp_path: Path) -> None:
    (tmp_path / "setup.py").write_text(SETUP_PY)
    request = _request(tmp_path, platform="windows", arch="sm120")
    request.source_dir = tmp_path / "causal-conv1d"
    env = setuptools.build_environment(request, tmp_path, jobs=1,  # type: ignore[arg-type]
                                       hook_report=tmp_path / "r", build_temp=None)
    assert env["FLASHBUILD_PATH_LIMIT"] == "260"
    linux = setuptools.build_environment(_request(tmp_path),  # type: ignore[arg-type]
                                         tmp_path, jobs=1, hook_report=tmp_path / "r",
                                         build_temp=None)
    assert "FLASHBUILD_PATH_LIMIT" not in linux
    report = tmp_path / "hook.jsonl"
    assert setuptools.too_long(report, request, tmp_path / "b") is None  # type: ignore[arg-type]
    longest = "C:\\Users\\someone\\b\\t\\" + "x" * 250 + ".obj"
    report.write_text(json.dumps({"too_long": longest, "limit": 260}) + "\n")
    err = setuptools.too_long(report, request, tmp_path / "b")  # type: ignore[arg-type]
    assert err is not None
    assert err.what.startswith(f"an object file path would have {len(longest)} characters")
    assert longest in err.evidence
    assert "C:\\src\\causal-conv1" in err.fix and "--build-dir" in err.fix
    assert "LongPathsEnabled does not help" in err.fix


def test_cuda13_cccl_reaches_the_host_compiler_on_both_platforms(tmp_path: Path) -> None:
    (tmp_path / "setup.py").write_text(SETUP_PY)
    (tmp_path / "cuda" / "include" / "cccl" / "cuda" / "std").mkdir(parents=True)
    cccl = str(tmp_path / "cuda" / "include" / "cccl")
    linux = setuptools.build_environment(_request(tmp_path), tmp_path, jobs=1,  # type: ignore[arg-type]
                                         hook_report=tmp_path / "r", build_temp=None)
    assert linux["CPLUS_INCLUDE_PATH"] == cccl
    windows = _request(tmp_path, platform="windows", arch="sm120")
    windows.env = {"PATH": "C:\\Windows", "Include": "C:\\VS\\include;C:\\Kits\\ucrt"}
    env = setuptools.build_environment(windows, tmp_path, jobs=1,  # type: ignore[arg-type]
                                       hook_report=tmp_path / "r", build_temp=None)
    # Appended to what vcvarsall set (searched after every /I), under the name it has.
    assert env["Include"] == f"C:\\VS\\include;C:\\Kits\\ucrt;{cccl}"
    assert "INCLUDE" not in env and "CPLUS_INCLUDE_PATH" not in env


def test_cuda12_layout_adds_no_include_folder(tmp_path: Path) -> None:
    (tmp_path / "setup.py").write_text(SETUP_PY)
    (tmp_path / "cuda" / "include" / "cuda" / "std").mkdir(parents=True)  # CCCL in include/
    env = setuptools.build_environment(_request(tmp_path, cuda="12.9"), tmp_path,  # type: ignore[arg-type]
                                       jobs=1, hook_report=tmp_path / "r", build_temp=None)
    assert "CPLUS_INCLUDE_PATH" not in env
