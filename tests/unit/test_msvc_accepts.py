"""Shapes that build with MSVC upstream (in their own Windows CI) must not be Windows errors:
each test is a small tree of one such shape, scanned for windows/sm_120 with static reading."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashbuild.scanning.findings import ScanOptions, Severity, make_target
from flashbuild.scanning.scan import scan_tree
from flashbuild.source.pp import Evaluator, host_pass


def _scan(tmp_path: Path, files: dict[str, str]) -> list[tuple[str, str, int, Severity]]:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    result = scan_tree(tmp_path, make_target("windows", "sm120"), ScanOptions(static=True))
    return [(f.rule, f.path, f.line, f.severity) for f in result.findings]


CMAKE = ("cmake_minimum_required(VERSION 3.24)\nproject(t LANGUAGES CXX CUDA)\n"
         "add_library(t SHARED k.cu)\n")


@pytest.mark.parametrize(("condition", "windows", "linux"), [
    ("defined(__has_attribute) && __has_attribute(always_inline)", 0, None),
    ("defined(__has_builtin) && __has_builtin(__builtin_expect)", 0, None),
    ("__has_attribute(noinline)", 0, None),
    # An unknown function-like macro is still unknown, but no longer hides the rest.
    ("PROJECT_FEATURE(1) || defined(_WIN32)", 1, None),
    ("PROJECT_FEATURE(a, (b)) && 0", 0, 0),
])
def test_gcc_feature_tests_are_false_for_cl(condition: str, windows: int | None,
                                            linux: int | None) -> None:
    assert Evaluator(host_pass("windows")).eval(condition) == windows
    assert Evaluator(host_pass("linux")).eval(condition) == linux


def test_an_attribute_behind_has_attribute_is_not_a_windows_error(tmp_path: Path) -> None:
    # bitsandbytes' csrc/cpu_ops.h: cl.exe takes the #else.
    header = ("#if defined(__has_attribute) && __has_attribute(always_inline)\n"
              "#define ALWAYS_INLINE __attribute__((__always_inline__)) inline\n"
              "#else\n#define ALWAYS_INLINE inline\n#endif\n"
              "ALWAYS_INLINE int twice(int x) { return 2 * x; }\n")
    found = _scan(tmp_path, {"CMakeLists.txt": CMAKE, "ops.h": header,
                             "k.cu": "#include \"ops.h\"\n__global__ void k(int* x) "
                                     "{ x[0] = twice(x[0]); }\n"})
    assert not [f for f in found if f[0] == "FB120"]
    # The same attribute with no test around it is still one.
    (tmp_path / "ops.h").write_text("__attribute__((always_inline)) inline int twice(int x)"
                                    " { return 2 * x; }\n", encoding="utf-8")
    found = _scan(tmp_path, {})
    assert [f[:3] for f in found if f[0] == "FB120"] == [("FB120", "ops.h", 1)]


def test_a_dll_output_set_in_a_windows_branch_is_not_missing(tmp_path: Path) -> None:
    # bitsandbytes' CMakeLists: RUNTIME_OUTPUT_DIRECTORY inside if(WIN32), and a later
    # LIBRARY_OUTPUT_DIRECTORY on its own for every platform.
    cmake = CMAKE + ('if(WIN32)\n  set_target_properties(t PROPERTIES LIBRARY_OUTPUT_DIRECTORY '
                     '"${PROJECT_SOURCE_DIR}/pkg")\n'
                     '  set_target_properties(t PROPERTIES RUNTIME_OUTPUT_DIRECTORY '
                     '"${PROJECT_SOURCE_DIR}/pkg")\nendif()\n'
                     'set_target_properties(t PROPERTIES LIBRARY_OUTPUT_DIRECTORY '
                     '"${PROJECT_SOURCE_DIR}/pkg")\n')
    found = _scan(tmp_path, {"CMakeLists.txt": cmake, "k.cu": "__global__ void k() {}\n"})
    assert not [f for f in found if f[0] == "FB191"]


def test_a_dll_output_never_set_is_reported_once(tmp_path: Path) -> None:
    cmake = CMAKE + ('set_target_properties(t PROPERTIES LIBRARY_OUTPUT_DIRECTORY "out")\n'
                     'set_property(TARGET t PROPERTY LIBRARY_OUTPUT_DIRECTORY "out")\n'
                     'if(NOT WIN32)\n  set_target_properties(t PROPERTIES '
                     'RUNTIME_OUTPUT_DIRECTORY "out")\nendif()\n')
    found = _scan(tmp_path, {"CMakeLists.txt": cmake, "k.cu": "__global__ void k() {}\n"})
    assert [f[:3] for f in found if f[0] == "FB191"] == [("FB191", "CMakeLists.txt", 4)]


@pytest.mark.parametrize(("shim", "use", "rule"), [
    # pytorch3d's pulsar: the builtin is the tree's own macro for cl.exe.
    ("#ifdef _MSC_VER\n#include <intrin.h>\n#define __builtin_popcount (int)__popcnt\n#endif\n",
     "inline int bits(unsigned v) { return __builtin_popcount(v); }\n", "FB121"),
    ("#ifdef _MSC_VER\n#define __attribute__(x)\n#endif\n",
     "__attribute__((unused)) static int unused_value = 0;\n", "FB120"),
    ("#ifdef _MSC_VER\n#include <BaseTsd.h>\ntypedef SSIZE_T ssize_t;\n#endif\n",
     "inline ssize_t half(ssize_t n) { return n / 2; }\n", "FB111"),
])
def test_the_trees_own_msvc_shim_is_not_an_error(tmp_path: Path, shim: str, use: str,
                                                 rule: str) -> None:
    kernel = "#include \"ops.h\"\n__global__ void k(int* x) { x[0] = 1; }\n"
    found = _scan(tmp_path, {"CMakeLists.txt": CMAKE, "ops.h": shim + use, "k.cu": kernel})
    assert not [f for f in found if f[0] == rule]
    # Without the shim the same use is an error.
    (tmp_path / "ops.h").write_text(use, encoding="utf-8")
    found = _scan(tmp_path, {})
    errors = [f[3] for f in found if f[0] == rule]
    assert errors and set(errors) == {Severity.ERROR}


def test_so_names_in_branches_for_other_platforms_are_not_windows_errors(tmp_path: Path
                                                                         ) -> None:
    # llama-cpp-python's `_ctypes_extensions.py`: a suffix per `sys.platform`, Windows' own.
    loader = ('import sys\n_WASM = ".cpython-00-wasm32-emscripten.so"\n'
              'def paths(base, name):\n'
              '    if sys.platform == "emscripten":\n        return [base + _WASM]\n'
              '    elif sys.platform.startswith("linux"):\n        return [f"lib{name}.so"]\n'
              '    elif sys.platform == "darwin":\n'
              '        return [f"lib{name}.so", f"lib{name}.dylib"]\n'
              '    elif sys.platform == "win32":\n        return [f"{name}.dll"]\n'
              '    return []\n')
    found = _scan(tmp_path, {"pkg/__init__.py": "", "pkg/load.py": loader})
    assert not [f for f in found if f[0] == "FB182"]
    (tmp_path / "pkg" / "other.py").write_text('NAME = "libkern.so"\n', encoding="utf-8")
    found = _scan(tmp_path, {})
    assert [f[:3] for f in found if f[0] == "FB182"] == [("FB182", "pkg/other.py", 1)]


def test_a_default_value_or_a_macro_a_header_defines_is_no_include_guard(tmp_path: Path
                                                                        ) -> None:
    # A review, 2026-11-29: `#ifndef USE_FAST / #define USE_FAST 0 / … / #else` is a default,
    # and cfg.h may define USE_FAST: the #else may be compiled, its GCC code is still found.
    source = ('#include "cfg.h"\n#ifndef USE_FAST\n#define USE_FAST 0\nint slow;\n#else\n'
              'inline int bits(unsigned v) { return __builtin_popcount(v); }\n#endif\n')
    found = _scan(tmp_path, {"CMakeLists.txt": CMAKE, "cfg.h": "#define USE_FAST 1\n",
                             "ops.h": source,
                             "k.cu": "#include \"ops.h\"\n__global__ void k() {}\n"})
    assert [f[:3] for f in found if f[0] == "FB121"] == [("FB121", "ops.h", 6)]
