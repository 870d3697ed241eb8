"""Configure/build command construction, arch validation, the configure stamp, build folders."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashbuild import platforms
from flashbuild.arch import parse_arch_spec
from flashbuild.building import builddir, cmake
from flashbuild.errors import UsageError
from tests.fakes import ReplayRunner

LINUX = platforms.get("linux")

# `nvcc --list-gpu-code` of CUDA 13.0 (FACTS.md), one code per line.
CODES_13_0 = "".join(f"sm_{c}\n" for c in (75, 80, 86, 87, 88, 89, 90, 100, 110, 103, 120, 121))
ARCHS_13_0 = CODES_13_0.replace("sm_", "compute_")
TOOLS = cmake.Tools(cmake=Path("/venv/cmake/bin/cmake"), ninja=Path("/venv/bin/ninja"))


def _inputs(tmp_path: Path, **over: object) -> cmake.ConfigureInputs:
    base: dict[str, object] = dict(
        source_dir=tmp_path / "src", build_dir=tmp_path / "b", output_dir=tmp_path / "b" / "out",
        nvcc=Path("/cuda/bin/nvcc"), toolkit_root=Path("/cuda"),
        arch=parse_arch_spec("sm_90a"), python="/venv/bin/python", pybind11_dir="/pb/cmake")
    base.update(over)
    return cmake.ConfigureInputs(**base)  # type: ignore[arg-type]


def _defines(argv: list[str]) -> dict[str, str]:
    return dict(a[2:].split("=", 1) for a in argv if a.startswith("-D"))


def test_configure_argv_has_every_input(tmp_path: Path) -> None:
    argv = cmake.configure_argv(TOOLS, _inputs(
        tmp_path, options={"FLASHKERN_FAST": "ON", "CMAKE_CUDA_FLAGS": "-lineinfo"},
        excludes=("sm90/hopper.cu", "a/b.cu"), launcher=Path("/usr/bin/sccache"),
        pools=cmake.JobPools(3, 2), extra_args=("--log-level=WARNING",),
        output_dir_var="FLASHKERN_OUTPUT_DIR", exclude_var="FLASHKERN_SOURCES_EXCLUDE"))
    # The program is a native path (backslashes on Windows); -D values are CMake's `/` form.
    assert argv[:8] == [str(TOOLS.cmake), "-S", str(tmp_path / "src"), "-B",
                        str(tmp_path / "b"), "-G", "Ninja", "--no-warn-unused-cli"]
    d = _defines(argv)
    assert d["CMAKE_CUDA_COMPILER"] == "/cuda/bin/nvcc"
    assert d["CMAKE_CUDA_ARCHITECTURES"] == "90a-real"
    assert d["CUDAToolkit_ROOT"] == "/cuda"
    assert d["CUDA_TOOLKIT_ROOT_DIR"] == "/cuda"  # FindCUDA's own: same toolkit for both
    assert d["Python_EXECUTABLE"] == "/venv/bin/python"
    assert d["pybind11_DIR"] == "/pb/cmake"
    assert "Torch_DIR" not in d  # no torch found: nothing passed
    assert d["CMAKE_MAKE_PROGRAM"] == "/venv/bin/ninja"
    assert d["FLASHKERN_OUTPUT_DIR"] == (tmp_path / "b" / "out").as_posix()
    assert d["FLASHKERN_SOURCES_EXCLUDE"] == "a/b.cu;sm90/hopper.cu"
    assert d["FLASHKERN_FAST"] == "ON"
    # The recipe's CUDA flags come first, then ptxas -v for the resource report.
    assert d["CMAKE_CUDA_FLAGS"] == "-lineinfo -Xptxas -v"
    assert d["CMAKE_CUDA_COMPILER_LAUNCHER"] == "/usr/bin/sccache"
    assert d["CMAKE_CXX_COMPILER_LAUNCHER"] == "/usr/bin/sccache"
    assert d["CMAKE_JOB_POOLS"] == "nvcc=3;link=2"
    assert d["CMAKE_JOB_POOL_COMPILE"] == "nvcc"
    assert argv[-1] == "--log-level=WARNING"


def test_without_project_variables_cmake_own_output_folders_are_set(tmp_path: Path) -> None:
    """A recipe that names no output/exclude variable (most upstream trees): CMake's own
    output-folder variables point at out/, and no exclusion variable is invented."""
    d = _defines(cmake.configure_argv(TOOLS, _inputs(tmp_path, excludes=("sm90/x.cu",))))
    out = (tmp_path / "b" / "out").as_posix()
    assert d["CMAKE_LIBRARY_OUTPUT_DIRECTORY"] == out
    assert d["CMAKE_RUNTIME_OUTPUT_DIRECTORY"] == out
    assert not any(key.startswith("FLASHKERN") for key in d)


def test_ccache_launches_only_cxx_and_cuda_only_pool(tmp_path: Path) -> None:
    d = _defines(cmake.configure_argv(TOOLS, _inputs(
        tmp_path, launcher=Path("/usr/bin/ccache"), launch_cuda=False,
        pools=cmake.JobPools(1, 1, cuda_only=True), exclude_var="MY_EXCLUDES",
        ptxas_verbose=False)))
    assert "CMAKE_CUDA_COMPILER_LAUNCHER" not in d
    assert d["CMAKE_CXX_COMPILER_LAUNCHER"] == "/usr/bin/ccache"
    assert d["FLASHBUILD_NVCC_JOB_POOL"] == "nvcc"
    assert "CMAKE_JOB_POOL_COMPILE" not in d
    assert d["MY_EXCLUDES"] == ""
    assert "CMAKE_CUDA_FLAGS" not in d


def test_windows_paths_get_forward_slashes(tmp_path: Path) -> None:
    d = _defines(cmake.configure_argv(TOOLS, _inputs(
        tmp_path, nvcc=Path("C:\\CUDA\\v13.0\\bin\\nvcc.exe"))))
    assert d["CMAKE_CUDA_COMPILER"] == "C:/CUDA/v13.0/bin/nvcc.exe"


def test_build_argv_is_ninja_directly() -> None:
    assert cmake.build_argv(TOOLS, Path("/b"), 4, ["_C"]) == [
        str(TOOLS.ninja), "-C", str(Path("/b")), "-j", "4", "_C"]


def test_list_gpu_codes_and_validate() -> None:
    runner = ReplayRunner()
    runner.add("nvcc", "--list-gpu-code", out=CODES_13_0)
    runner.add("nvcc", "--list-gpu-arch", out=ARCHS_13_0)
    codes = cmake.list_gpu_codes(Path("/cuda/bin/nvcc"), runner, {})
    assert "sm_120" in codes and "compute_90" in codes
    for ok in ("sm_90a", "sm120", "120f", "compute_120", "90a;120"):
        cmake.validate_arch(parse_arch_spec(ok), codes, Path("/cuda/bin/nvcc"))
    with pytest.raises(UsageError) as info:
        cmake.validate_arch(parse_arch_spec("sm_70;sm_90"), codes, Path("/cuda/bin/nvcc"))
    assert "sm_70" in info.value.what and "sm_90" not in info.value.what
    assert "sm_75" in info.value.evidence and "sm_121" in info.value.evidence


def test_configure_stamp(tmp_path: Path) -> None:
    argv = ["cmake", "-S", "a"]
    digest = cmake.configure_hash(argv, {"PATH": "/x"}, LINUX)
    assert cmake.needs_configure(tmp_path, digest)  # nothing there
    (tmp_path / "build.ninja").write_text("")
    assert cmake.needs_configure(tmp_path, digest)  # no stamp
    cmake.record_configure(tmp_path, digest, argv)
    assert not cmake.needs_configure(tmp_path, digest)
    # A changed argument or MSVC environment means a new configure; PATH alone does not.
    assert cmake.configure_hash(argv, {"PATH": "/y"}, LINUX) == digest
    assert cmake.configure_hash(argv, {"INCLUDE": "C:/x"}, LINUX) != digest
    assert cmake.needs_configure(tmp_path, cmake.configure_hash([*argv, "-DX=1"], {}, LINUX))
    (tmp_path / "build.ninja").unlink()
    assert cmake.needs_configure(tmp_path, digest)
    cmake.forget_configure(tmp_path)
    assert not (tmp_path / cmake.CONFIGURE_STAMP).exists()


def test_configure_stamp_reads_msvc_variables_case_insensitively_on_windows() -> None:
    # Issue 20: `dict(os.environ)` on Windows holds VCTOOLSVERSION; the case-sensitive lookup
    # of VCToolsVersion found nothing, so another toolset did not reconfigure.
    win = platforms.get("windows")
    argv = ["cmake", "-S", "a"]
    assert cmake.configure_hash(argv, {"VCTOOLSVERSION": "14.44.35207"}, win) != \
        cmake.configure_hash(argv, {"VCTOOLSVERSION": "14.50.35717"}, win)
    assert cmake.configure_hash(argv, {"VCTOOLSVERSION": "14.44.35207"}, win) == \
        cmake.configure_hash(argv, {"VCToolsVersion": "14.44.35207"}, win)
    assert cmake.configure_hash(argv, {"Lib": "C:/a"}, win) != \
        cmake.configure_hash(argv, {"Lib": "C:/b"}, win)


KEY = builddir.BuildKey(recipe="csrc", arch="90a-real", platform="linux",
                        toolkit="/cuda/bin/nvcc|13.0.88|abc", host_compiler="gcc 13.3.0")


def test_build_keys_differ_per_arch_and_toolkit() -> None:
    other_arch = builddir.BuildKey(**{**KEY.__dict__, "arch": "120-real"})
    other_tk = builddir.BuildKey(**{**KEY.__dict__, "toolkit": "/cuda12/bin/nvcc|12.9|x"})
    names = {KEY.folder_name(), other_arch.folder_name(), other_tk.folder_name()}
    assert len(names) == 3
    assert KEY.folder_name().startswith("csrc-90a_real-linux-")
    assert KEY.folder_name() == builddir.BuildKey(**KEY.__dict__).folder_name()


def test_build_keys_differ_per_tree_and_interpreter() -> None:
    """Two sibling trees under one recipe name, and one tree built by two Pythons, get their
    own folders (the second tree once installed the first tree's stale module)."""
    tree_a = builddir.BuildKey(**{**KEY.__dict__, "source": "/src/a"})
    tree_b = builddir.BuildKey(**{**KEY.__dict__, "source": "/src/b"})
    venv = builddir.BuildKey(**{**KEY.__dict__, "source": "/src/a", "python": "/venv/bin/python"})
    assert len({tree_a.folder_name(), tree_b.folder_name(), venv.folder_name()}) == 3


def test_prepare_default_root_and_key_file(tmp_path: Path) -> None:
    src = tmp_path / "csrc"
    src.mkdir()
    got = builddir.prepare(KEY, Path("/cuda/bin/nvcc"), source_dir=src)
    assert got.path == tmp_path / "build" / "flashbuild" / KEY.folder_name()
    assert got.fresh and got.set_aside is None
    assert '"arch": "90a-real"' in (got.path / builddir.KEY_FILE).read_text()


def test_folder_from_another_toolkit_is_set_aside(tmp_path: Path) -> None:
    folder = tmp_path / "b"
    folder.mkdir()
    (folder / "CMakeCache.txt").write_text(
        "# cache\nCMAKE_CUDA_COMPILER:FILEPATH=/opt/cuda-12.9/bin/nvcc\nX:BOOL=ON\n")
    (folder / "keep.o").write_text("old object")
    got = builddir.prepare(KEY, tmp_path / "nvcc13", explicit=folder, source_dir=tmp_path)
    assert got.set_aside == tmp_path / "b.stale"
    assert (tmp_path / "b.stale" / "keep.o").read_text() == "old object"
    assert "another CUDA compiler" in got.reason and "/opt/cuda-12.9/bin/nvcc" in got.reason
    assert got.fresh and not (folder / "CMakeCache.txt").exists()


def test_same_toolkit_folder_is_reused(tmp_path: Path) -> None:
    folder = tmp_path / "b"
    folder.mkdir()
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("")
    (folder / "CMakeCache.txt").write_text(f"CMAKE_CUDA_COMPILER:FILEPATH={nvcc}\n")
    got = builddir.prepare(KEY, nvcc, explicit=folder, source_dir=tmp_path)
    assert got.set_aside is None and not got.fresh
    assert cmake.read_cache_value(folder, "CMAKE_CUDA_COMPILER") == str(nvcc)
    assert cmake.read_cache_value(folder, "MISSING") is None


def test_wheel_tools_named_by_platform_not_by_pathext() -> None:
    # The OS is decided in platforms/ (STYLE 2): a PATHEXT variable in a Linux environment
    # (set by an MSYS-style tool, or copied from a Windows env file) must not make flashbuild
    # look for `cmake.exe` in the wheel and fall back to an older cmake on PATH.
    from flashbuild import platforms

    tools = cmake.find_tools(ReplayRunner(), {"PATHEXT": ".EXE;.BAT", "PATH": "/nowhere"},
                             platforms.get("linux"))
    assert tools.cmake.name == "cmake" and tools.cmake.is_file()
    assert tools.ninja.name == "ninja" and tools.ninja.is_file()


@pytest.mark.parametrize(("module_text", "added"), [
    # CMake 4.x: include folders from the CUDA compiler's implicit ones (nvcc's include/cccl).
    ("_CUDAToolkit_build_include_dirs(CUDAToolkit_INCLUDE_DIRECTORIES "
     "CMAKE_CUDA_TOOLKIT_INCLUDE_DIRECTORIES)\n", False),
    # CMake 3.25: `${CUDAToolkit_TARGET_DIR}/include` alone.
    ('set(CUDAToolkit_INCLUDE_DIR "${CUDAToolkit_TARGET_DIR}/include")\n', True),
    (None, True),  # no module found next to this cmake: add it (a duplicate is harmless)
])
def test_cccl_goes_to_cxx_only_where_cmake_does_not_give_it(
        tmp_path: Path, module_text: str | None, added: bool) -> None:
    prefix = tmp_path / "cmake"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "cmake").write_text("")
    if module_text is not None:
        modules = prefix / "share" / "cmake-9.9" / "Modules"
        modules.mkdir(parents=True)
        (modules / "FindCUDAToolkit.cmake").write_text(module_text)
    tools = cmake.Tools(cmake=prefix / "bin" / "cmake", ninja=Path("/venv/bin/ninja"))
    cccl = Path("/cuda/include/cccl")
    d = _defines(cmake.configure_argv(tools, _inputs(tmp_path, cccl_dir=cccl)))
    assert (d.get("CMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES") == "/cuda/include/cccl") is added
    # CUDA 12 (no include/cccl): never.
    d = _defines(cmake.configure_argv(tools, _inputs(tmp_path, cccl_dir=None)))
    assert "CMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES" not in d
