"""The rule families of issue 30, each on a few lines of C++/CUDA written here: what MSVC
rejects (FB113 math constants, FB114 designated initialisers, FB115 constexpr captures, FB116
filesystem paths, FB122 inline assembly), what GCC 13 no longer includes (FB117), library
headers no folder holds (FB118), and FB231 for a tree without pyproject.toml."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashbuild.scanning.findings import Finding, ScanOptions, Truth, make_target
from flashbuild.scanning.scan import scan_tree
from flashbuild.source.treemodel import BuildTarget, SourceUnit, TreeModel

RULES = ("FB113", "FB114", "FB115", "FB116", "FB117", "FB118", "FB122", "FB231")


@pytest.fixture(autouse=True)
def _no_machine_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    """FB118 looks in this machine's include folders: the tests decide what they hold."""
    monkeypatch.setattr("flashbuild.scanning.checks_lang.machine_include_dirs",
                        lambda _platform, _env: ())
    monkeypatch.setattr("flashbuild.scanning.checks_lang.wheel_include_dirs", tuple)


def _scan(tmp_path: Path, files: dict[str, str], platform: str = "windows",
          model: TreeModel | None = None) -> list[Finding]:
    root = tmp_path / "tree"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    result = scan_tree(root, make_target(platform, "sm120"), ScanOptions(static=True, jobs=1),
                       model=model)
    return [f for f in result.findings if f.rule in RULES]


def _model(path: str, *, defines: tuple[str, ...] = (), flags: tuple[str, ...] = ()
           ) -> TreeModel:
    """A configured build (what introspection reads) compiling one unit."""
    unit = SourceUnit(path=path, language="CXX", includes=(), defines=defines, flags=flags,
                      arch_flags=(), origin="test")
    return TreeModel(system="cmake", via="CMake File API (codemodel-v2, cache-v2)", targets=(
        BuildTarget(name="m", kind="module", artifact="m.pyd", sources=(unit,),
                    defined_at="CMakeLists.txt:3 (pybind11_add_module)"),))


def _keys(found: list[Finding]) -> list[tuple[str, str, int, str]]:
    return [(f.rule, f.path, f.line, f.severity.value) for f in found]


# --- FB113: M_PI without _USE_MATH_DEFINES -------------------------------------------------

CIRCLE = "#include <cmath>\n\ndouble area(double r) { return M_PI * r * r; }\n"


def test_math_constant_without_define_is_a_windows_error(tmp_path: Path) -> None:
    found = _scan(tmp_path, {"src/circle.cpp": CIRCLE})
    assert _keys(found) == [("FB113", "src/circle.cpp", 3, "error")]
    assert "C2065" in found[0].message
    assert found[0].snippet == "double area(double r) { return M_PI * r * r; }"
    assert "_USE_MATH_DEFINES" in found[0].fix.manual
    assert _scan(tmp_path / "linux", {"src/circle.cpp": CIRCLE}, "linux") == []


@pytest.mark.parametrize("files", [
    {"src/circle.cpp": "#define _USE_MATH_DEFINES\n" + CIRCLE},
    # The tree's own fallback definition.
    {"src/circle.cpp": "#include <cmath>\n#ifndef M_PI\n#define M_PI 3.14159265358979\n"
     "#endif\ndouble area(double r) { return M_PI * r * r; }\n"},
    # A define the build passes to every unit.
    {"src/circle.cpp": CIRCLE, "CMakeLists.txt":
     "cmake_minimum_required(VERSION 3.24)\nproject(c LANGUAGES CXX)\n"
     "add_compile_definitions(_USE_MATH_DEFINES)\nadd_library(c SHARED src/circle.cpp)\n"},
    # In a .cu file a define followed by <math.h> (which UCRT reads again) works.
    {"src/k.cu": "#define _USE_MATH_DEFINES\n#include <math.h>\n"
     "__device__ float f(float x) { return x * M_LOG2E; }\n"},
], ids=["define-first", "own-fallback", "cmake-define", "cu-math-h-after-define"])
def test_math_constant_defined_is_quiet(tmp_path: Path, files: dict[str, str]) -> None:
    assert _scan(tmp_path, files) == []


def test_the_configured_builds_defines_and_standard_count(tmp_path: Path) -> None:
    files = {"src/circle.cpp": CIRCLE + DESIG}
    found = _scan(tmp_path, files, model=_model("src/circle.cpp", flags=("-std:c++17",)))
    assert [f.rule for f in found] == ["FB113", "FB114"]
    assert found[1].truth is Truth.BUILD
    assert "`-std:c++17` for src/circle.cpp (CMake File API" in found[1].evidence
    quiet = _model("src/circle.cpp", defines=("_USE_MATH_DEFINES",), flags=("-std:c++20",))
    assert _scan(tmp_path / "quiet", files, model=quiet) == []


def test_math_define_in_a_cu_file_before_cmath_comes_too_late(tmp_path: Path) -> None:
    cu = "#define _USE_MATH_DEFINES\n#include <cmath>\n" \
        "__device__ float f(float x) { return x * M_SQRT2; }\n"
    found = _scan(tmp_path, {"src/k.cu": cu})
    assert _keys(found) == [("FB113", "src/k.cu", 3, "error")]
    assert "cuda_runtime.h" in found[0].evidence


def test_math_define_from_setup_py_flags_is_quiet(tmp_path: Path) -> None:
    setup = SETUP.replace('"-O3"', '"-O3", "-D_USE_MATH_DEFINES"')
    found = _scan(tmp_path, {"setup.py": setup, "pyproject.toml": PYPROJECT,
                             "csrc/api.cpp": CIRCLE, "csrc/k.cu": "__global__ void k() {}\n"})
    assert [f for f in found if f.rule == "FB113"] == []
    found = _scan(tmp_path / "without", {"setup.py": SETUP, "pyproject.toml": PYPROJECT,
                                         "csrc/api.cpp": CIRCLE,
                                         "csrc/k.cu": "__global__ void k() {}\n"})
    assert [(f.rule, f.path) for f in found if f.rule == "FB113"] == [("FB113", "csrc/api.cpp")]


def test_math_constant_in_a_unit_reaching_torch_is_a_note(tmp_path: Path) -> None:
    # torch's MT19937RNGEngine.h defines _USE_MATH_DEFINES and includes <math.h> again: the
    # order of includes decides (flash-attention's softmax.h builds on Windows this way).
    files = {"src/softmax.h": "#pragma once\n#include <cmath>\n"
             "inline float scale(float x) { return x * M_LOG2E; }\n",
             "src/api.cpp": "#include <torch/extension.h>\n#include \"softmax.h\"\n"}
    found = _scan(tmp_path, files)
    assert _keys(found) == [("FB113", "src/softmax.h", 3, "note")]
    assert "src/api.cpp reaches torch's headers" in found[0].evidence


# --- FB122: GNU inline assembly in host code ------------------------------------------------

def test_inline_asm_in_host_code_is_a_windows_error(tmp_path: Path) -> None:
    files = {
        "src/ticks.cpp": "unsigned long long ticks() {\n  unsigned lo, hi;\n"
                         "  asm volatile(\"rdtsc\" : \"=a\"(lo), \"=d\"(hi));\n"
                         "  return ((unsigned long long)hi << 32) | lo;\n}\n",
        "src/k.cu": "__device__ unsigned lane() {\n  unsigned id;\n"
                    "  asm volatile(\"mov.u32 %0, %%laneid;\" : \"=r\"(id));\n  return id;\n}\n"
                    "void fence() { __asm__ __volatile__(\"\" ::: \"memory\"); }\n"
                    "#define MY_DEVICE __forceinline__ __device__\n"
                    "MY_DEVICE void spin() { asm volatile(\"nanosleep.u32 20;\"); }\n"
                    "UNKNOWN_QUALIFIER void other() { asm volatile(\"\" ::: \"memory\"); }\n",
        "src/guarded.cpp": "void pause_cpu() {\n#ifndef _MSC_VER\n"
                           "  __asm__ volatile(\"pause\");\n#endif\n}\n",
    }
    found = _scan(tmp_path, files)
    assert _keys(found) == [("FB122", "src/k.cu", 6, "error"),
                            ("FB122", "src/ticks.cpp", 3, "error")]
    assert "host function `fence`" in found[0].evidence
    assert _scan(tmp_path / "linux", files, "linux") == []


# --- FB114: designated initialisers below C++20 --------------------------------------------

DESIG = "struct Opts { int tile; bool causal; };\n" \
    "Opts make() { return Opts{.tile = 128, .causal = true}; }\n"


def _cmake(standard: str) -> str:
    return ("cmake_minimum_required(VERSION 3.24)\nproject(d LANGUAGES CXX)\n" + standard
            + "add_library(d SHARED src/opts.cpp)\n")


def test_designated_initializer_under_cxx17_is_a_windows_error(tmp_path: Path) -> None:
    files = {"src/opts.cpp": DESIG, "CMakeLists.txt": _cmake("set(CMAKE_CXX_STANDARD 17)\n")}
    found = _scan(tmp_path, files)
    assert _keys(found) == [("FB114", "src/opts.cpp", 2, "error")]
    assert "C7555" in found[0].message
    assert "compiled as C++17 (CMakeLists.txt:3)" in found[0].evidence
    assert _scan(tmp_path / "linux", files, "linux") == []  # gcc: a pedantic warning only


@pytest.mark.parametrize("standard", ["set(CMAKE_CXX_STANDARD 20)\n", ""],
                         ids=["cxx20", "no-standard-named"])
def test_designated_initializer_quiet_unless_the_build_says_cxx17(
        tmp_path: Path, standard: str) -> None:
    assert _scan(tmp_path, {"src/opts.cpp": DESIG, "CMakeLists.txt": _cmake(standard)}) == []


def test_designated_initializer_standard_from_setup_py_flags(tmp_path: Path) -> None:
    setup = SETUP.replace('"cxx": ["-O3"]', '"cxx": ["-O3", "-std=c++17"]')
    found = _scan(tmp_path, {"setup.py": setup, "pyproject.toml": PYPROJECT,
                             "csrc/api.cpp": DESIG, "csrc/k.cu": "__global__ void k() {}\n"})
    fb114 = [f for f in found if f.rule == "FB114"]
    assert _keys(fb114) == [("FB114", "csrc/api.cpp", 2, "error")]
    assert "`-std=c++17` in setup.py:" in fb114[0].evidence


# --- FB115: constexpr local in a capturing lambda -------------------------------------------

LAMBDA = """template <int N> int twice() { return 2 * N; }
int run() {
  constexpr int kTile = 64;
  auto f = [&]() { return twice<kTile>(); };
  return f();
}
"""


def test_constexpr_captured_as_template_argument_is_a_windows_warning(tmp_path: Path) -> None:
    found = _scan(tmp_path, {"src/run.cpp": LAMBDA})
    assert _keys(found) == [("FB115", "src/run.cpp", 4, "warning")]
    assert "C2975" in found[0].message
    assert "static constexpr" in found[0].fix.manual
    assert "captures with `[&]`" in found[0].evidence
    assert _scan(tmp_path / "linux", {"src/run.cpp": LAMBDA}, "linux") == []


@pytest.mark.parametrize("text", [
    LAMBDA.replace("constexpr int", "static constexpr int"),
    LAMBDA.replace("[&]", "[]"),
    LAMBDA.replace("{ return twice<kTile>(); }",
                   "{ constexpr int kTile = 8; return twice<kTile>(); }"),
], ids=["static", "no-capture", "declared-in-lambda"])
def test_constexpr_lambda_quiet_shapes(tmp_path: Path, text: str) -> None:
    assert _scan(tmp_path, {"src/run.cpp": text}) == []


# --- FB116: filesystem path c_str() -----------------------------------------------------------

FS = """#include <cstdio>
#include <filesystem>
namespace fs = std::filesystem;
FILE* open_cfg(const std::filesystem::path& dir) {
  fs::path p = dir / "cfg.txt";
  const char* name = dir.native().c_str();
  FILE* a = fopen(p.string().c_str(), "r");
  FILE* b = _wfopen(p.c_str(), L"r");
  return fopen(p.c_str(), name);
}
"""


def test_filesystem_path_c_str_is_a_windows_warning(tmp_path: Path) -> None:
    found = _scan(tmp_path, {"src/cfg.cpp": FS})
    assert _keys(found) == [("FB116", "src/cfg.cpp", 6, "warning"),
                            ("FB116", "src/cfg.cpp", 9, "warning")]
    assert "`dir.native().c_str()`" in found[0].message
    assert "the result goes to `fopen`" in found[1].evidence
    assert found[1].fix.manual.startswith("use `p.string().c_str()`")
    assert _scan(tmp_path / "linux", {"src/cfg.cpp": FS}, "linux") == []


# --- FB117: <cstdint> under GCC 13 ---------------------------------------------------------

IDS = "#include <string>\n#include <vector>\n#include \"util.h\"\n" \
    "std::vector<uint32_t> ids(const std::string& s) { return {uint32_t(s.size())}; }\n"
UTIL = "#pragma once\n#include <cstddef>\ninline std::uint64_t twice(std::uint64_t x) " \
    "{ return 2 * x; }\n"


def test_fixed_width_types_without_cstdint_warn_for_linux(tmp_path: Path) -> None:
    files = {"src/ids.cpp": IDS, "src/util.h": UTIL}
    found = _scan(tmp_path, files, "linux")
    assert _keys(found) == [("FB117", "src/ids.cpp", 4, "warning"),
                            ("FB117", "src/util.h", 3, "warning")]
    assert "unit src/ids.cpp includes <cstddef>, <string>, <vector>" in found[0].evidence
    assert found[1].fix.manual == "add `#include <cstdint>` to src/util.h"
    # MSVC's library still declares them: a note for Windows.
    assert {f.severity.value for f in _scan(tmp_path / "win", files)} == {"note"}


@pytest.mark.parametrize("files", [
    {"src/ids.cpp": "#include <cstdint>\n" + IDS, "src/util.h": UTIL},
    {"src/ids.cpp": IDS, "src/util.h": UTIL.replace("<cstddef>", "<stdint.h>")},
    # <memory> needs uintptr_t itself, a library header may declare anything.
    {"src/ids.cpp": "#include <memory>\n" + IDS, "src/util.h": UTIL},
    {"src/ids.cpp": "#include <cuda_runtime.h>\n" + IDS, "src/util.h": UTIL},
    # glibc's <stdlib.h> declares the signed types through <sys/types.h>.
    {"src/ids.cpp": "#include <string>\nint64_t n(const std::string& s) { return s.size(); }\n"},
    {"src/ids.cpp": "#include <string>\ntypedef unsigned int uint32_t;\n"
     "uint32_t n(const std::string& s) { return s.size(); }\n"},
], ids=["cstdint", "stdint.h-in-header", "memory", "library-header", "signed", "own-typedef"])
def test_fixed_width_types_quiet_shapes(tmp_path: Path, files: dict[str, str]) -> None:
    assert _scan(tmp_path, files, "linux") == []


# --- FB118: library headers no folder holds ------------------------------------------------

NCCL = "#include <nccl.h>\nint world() { return 1; }\n"


def test_library_header_not_found_names_the_package(tmp_path: Path) -> None:
    for platform in ("linux", "windows"):
        found = _scan(tmp_path / platform, {"src/comm.cpp": NCCL}, platform)
        assert _keys(found) == [("FB118", "src/comm.cpp", 1, "warning")]
        assert "nvidia-nccl-cu13" in found[0].fix.manual
        assert found[0].snippet == "#include <nccl.h>"


def test_library_header_found_by_the_build_is_quiet(tmp_path: Path) -> None:
    nccl_home = tmp_path / "nccl" / "include"
    nccl_home.mkdir(parents=True)
    (nccl_home / "nccl.h").write_text("#pragma once\n", encoding="utf-8")
    setup = SETUP.replace('["csrc/api.cpp", "csrc/k.cu"]',
                          f'["csrc/api.cpp", "csrc/k.cu"], include_dirs=[{str(nccl_home)!r}]')
    files = {"setup.py": setup, "pyproject.toml": PYPROJECT, "csrc/api.cpp": NCCL,
             "csrc/k.cu": "__global__ void k() {}\n"}
    assert [f for f in _scan(tmp_path, files) if f.rule == "FB118"] == []
    files["setup.py"] = SETUP
    assert [f.rule for f in _scan(tmp_path / "without", files)].count("FB118") == 1


@pytest.mark.parametrize("files", [
    {"src/comm.cpp": "#ifdef USE_NCCL\n#include <nccl.h>\n#endif\n"},
    {"src/comm.cpp": NCCL, "third/nccl.h": "#pragma once\n"},
    {"src/comm.cpp": NCCL, "CMakeLists.txt":
     "cmake_minimum_required(VERSION 3.24)\nproject(c LANGUAGES CXX)\nfind_package(NCCL)\n"
     "add_library(c SHARED src/comm.cpp)\n"},
], ids=["optional", "in-tree", "cmake-finds-it"])
def test_library_header_quiet_shapes(tmp_path: Path, files: dict[str, str]) -> None:
    assert _scan(tmp_path, files, "linux") == []


# --- FB231: no pyproject.toml ---------------------------------------------------------------

SETUP = """from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="t",
    ext_modules=[CUDAExtension("t._C", ["csrc/api.cpp", "csrc/k.cu"],
                               extra_compile_args={"cxx": ["-O3"], "nvcc": ["-O3"]})],
    cmdclass={"build_ext": BuildExtension},
)
"""
PYPROJECT = '[build-system]\nrequires = ["setuptools", "torch"]\n'


@pytest.mark.parametrize("pyproject", [None, "[project]\nname = \"t\"\n"],
                         ids=["no-pyproject", "no-build-system"])
def test_setup_importing_torch_without_build_requires(tmp_path: Path,
                                                      pyproject: str | None) -> None:
    files = {"setup.py": SETUP, "csrc/api.cpp": "int f() { return 1; }\n",
             "csrc/k.cu": "__global__ void k() {}\n"}
    if pyproject is not None:
        files["pyproject.toml"] = pyproject
    found = [f for f in _scan(tmp_path, files, "linux") if f.rule == "FB231"]
    assert _keys(found) == [("FB231", "setup.py", 2, "warning")]
    assert "import torch" in found[0].message
    # A [build-system] that requires torch is fine on Linux (CUDA torch from PyPI).
    files["pyproject.toml"] = PYPROJECT
    assert [f for f in _scan(tmp_path / "ok", files, "linux") if f.rule == "FB231"] == []
