"""Scan rules decided by what the build really compiles (issue 18, scan truth): IDE-only
macros, the device call graph behind FB160, torch's platform constants in setup.py, the
host-compile CCCL reach, clock-based versions, sources of several archs, CMake switches that
stand for an arch gate, and the CMake/packaging rules FlashRT showed."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from flashbuild.arch import parse_arch_spec
from flashbuild.scanning.facts import ArchFallbackFacts, ExtensionImportFacts
from flashbuild.scanning.findings import ScanOptions, make_target
from flashbuild.scanning.scan import scan_tree
from flashbuild.source.hostinclude import first_cccl_include
from flashbuild.source.pp import Evaluator, device_pass
from flashbuild.source.setuppy import analyze_setup

if TYPE_CHECKING:
    from pathlib import Path

    from flashbuild.scanning.findings import Finding

SM120 = parse_arch_spec("sm120").archs[0]


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def _scan(root: Path, platform: str = "linux") -> list[Finding]:
    # Static: unit tests start no process (the preprocessor's verdicts are integration tests).
    return list(scan_tree(root, make_target(platform, "sm120"), ScanOptions(static=True))
                .findings)


def _by_rule(findings: list[Finding], rule: str) -> list[Finding]:
    return [f for f in findings if f.rule == rule]


# --- the preprocessor state ---------------------------------------------------------------

def test_ide_only_macros_are_undefined_in_a_build() -> None:
    cond = "__CUDA_ARCH__ >= 1000 && __CUDA_ARCH__ < 1200 || defined(__CLION_IDE__)"
    assert Evaluator(device_pass("linux", SM120)).eval(cond) == 0
    assert Evaluator(device_pass("linux", parse_arch_spec("sm100a").archs[0])).eval(cond) == 1


def test_clion_gate_ending_before_sm120_is_reported(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"k.cuh": (
        "#pragma once\n"
        "__global__ void k() {\n"
        "#if (__CUDA_ARCH__ >= 1000 && __CUDA_ARCH__ < 1200) || defined(__CLION_IDE__)\n"
        "  do_work();\n"
        "#endif\n"
        "}\n")})
    assert [f.line for f in _by_rule(_scan(root), "FB151")] == [3]


# --- FB160 and the device call graph ----------------------------------------------------------

_ASM = 'asm volatile("tcgen05.commit.cta_group::1.b64 [%0];" :: "r"(b));'
_WRAPPER = ("#pragma once\n"
            "__device__ __forceinline__ void commit_arrive(unsigned bar) {\n"
            "  asm volatile(\"tcgen05.commit.cta_group::1.b64 [%0];\" :: \"r\"(bar));\n"
            "}\n")


def test_tcgen05_in_a_function_no_target_kernel_calls_is_a_note(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"wrap.cuh": _WRAPPER, "k.cu": (
        "#include \"wrap.cuh\"\n"
        "__global__ void k(unsigned b) {\n"
        "#if __CUDA_ARCH__ >= 1000 && __CUDA_ARCH__ < 1200\n"
        "  commit_arrive(b);\n"
        "#endif\n"
        "}\n")})
    found = _by_rule(_scan(root), "FB160")
    assert [(f.path, f.severity.value) for f in found] == [("wrap.cuh", "note")]
    assert "no kernel compiled for" in found[0].message


def test_tcgen05_reached_through_a_device_function_stays_an_error(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"wrap.cuh": _WRAPPER, "k.cu": (
        "#include \"wrap.cuh\"\n"
        "__device__ void step(unsigned b) { commit_arrive(b); }\n"
        "__global__ void k(unsigned b) { step(b); }\n")})
    found = _by_rule(_scan(root), "FB160")
    assert [(f.path, f.severity.value) for f in found] == [("wrap.cuh", "error")]


def test_tcgen05_in_an_atom_used_as_a_type_by_a_kernel_stays_an_error(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"atom.cuh": (
        "#pragma once\n"
        "struct SM100_MMA_ATOM {\n"
        "  __device__ static void fma(unsigned a) {\n"
        "    asm volatile(\"tcgen05.mma.cta_group::1.kind::f16 [%0];\" :: \"r\"(a));\n"
        "  }\n"
        "};\n"), "k.cu": (
        "#include \"atom.cuh\"\n"
        "using Mma = SM100_MMA_ATOM;\n"
        "__global__ void k(unsigned a) { Mma::fma(a); }\n")})
    assert [f.severity.value for f in _by_rule(_scan(root), "FB160")] == ["error"]


# --- setup.py -------------------------------------------------------------------------------------

def test_torch_is_windows_decides_the_cxx_flags() -> None:
    text = ("from setuptools import setup\n"
            "from torch.utils.cpp_extension import CUDAExtension, IS_WINDOWS\n"
            "if IS_WINDOWS:\n    cxx = ['/O2']\nelse:\n    cxx = ['-O3']\n"
            "setup(ext_modules=[CUDAExtension(name='m', sources=['a.cu'], "
            "extra_compile_args={'cxx': cxx, 'nvcc': []})])\n")
    for platform, flags in (("windows", ("/O2",)), ("linux", ("-O3",))):
        setup = analyze_setup(text, "setup.py", platform=platform, archs=[SM120],
                              files=["setup.py", "a.cu"])
        assert setup is not None
        assert setup.extensions[0].cxx_flags == flags


_SETUP_CCCL = (
    "from setuptools import setup\n"
    "from torch.utils.cpp_extension import CUDAExtension\n"
    "setup(name='m', version='1.0',\n"
    "      ext_modules=[CUDAExtension(name='m', sources=['api.cpp', 'k.cu'],\n"
    "                                 include_dirs=['lib/include'])])\n")


def test_host_cpp_reaching_cccl_through_a_macro_include(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "setup.py": _SETUP_CCCL, "k.cu": "__global__ void k() {}\n",
        "api.cpp": "#include <lib/math.h>\n",
        "lib/include/lib/cfg.h": ("#pragma once\n#if (__CUDACC_VER_MAJOR__ >= 13)\n"
                                  "#define STD_HEADER(h) <cccl/cuda/std/h>\n#else\n"
                                  "#define STD_HEADER(h) <cuda/std/h>\n#endif\n"),
        "lib/include/lib/math.h": ("#pragma once\n#include \"lib/cfg.h\"\n"
                                   "#if defined(__CUDACC_RTC__)\n#include STD_HEADER(cstdint)\n"
                                   "#endif\n#include STD_HEADER(utility)\n")})
    found = _by_rule(_scan(root), "FB222")
    # `flashbuild build` gives the host compiler include/cccl itself: a warning, not an error
    # (issue 28: a scan error means the build fails without a change).
    assert [(f.path, f.line, f.severity.value) for f in found] == [("setup.py", 5, "warning")]
    assert "include/cccl" in found[0].handled
    assert "<cuda/std/utility>" in found[0].message


def test_host_cpp_whose_cccl_include_is_nvrtc_only_is_fine(tmp_path: Path) -> None:
    files = {"a.cpp": "#include <lib/x.h>\n",
             "inc/lib/x.h": "#if defined(__CUDACC_RTC__)\n#include <cuda/std/cstdint>\n"
                            "#else\n#include <cstdint>\n#endif\n"}
    root = _tree(tmp_path, files)

    def read(rel: str) -> str | None:
        path = root / rel
        return path.read_text(encoding="utf-8") if path.is_file() else None

    assert first_cccl_include("a.cpp", ["inc"], read, "linux") is None
    assert first_cccl_include("a.cpp", ["inc"], read, "windows") is None


def test_version_from_the_clock_in_a_tree_without_git(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"setup.py": (
        "import subprocess\nfrom datetime import datetime\nfrom setuptools import setup\n"
        "from torch.utils.cpp_extension import CUDAExtension\n"
        "try:\n    rev = '+' + subprocess.check_output(['git', 'rev-parse', 'HEAD']).decode()\n"
        "except Exception:\n    rev = '+' + datetime.now().strftime('%Y%m%d%H%M%S')\n"
        "setup(name='m', version='1.0' + rev,\n"
        "      ext_modules=[CUDAExtension(name='m', sources=['k.cu'])])\n"),
        "k.cu": "__global__ void k() {}\n"})
    found = _by_rule(_scan(root), "FB233")
    assert [(f.line, f.severity.value) for f in found] == [(6, "error")]
    (root / ".git").mkdir()
    assert [f.severity.value for f in _by_rule(_scan(root), "FB233")] == ["warning"]


def test_sources_of_several_archs_under_a_hard_coded_gencode(tmp_path: Path) -> None:
    setup = ("from setuptools import setup\n"
             "from torch.utils.cpp_extension import CUDAExtension\n"
             "flags = ['-gencode', 'arch=compute_90a,code=sm_90a']\n"
             "setup(name='m', version='1', ext_modules=[CUDAExtension(name='m', sources=[\n"
             "    'api.cpp',\n    'sm90/a.cu',\n    'sm100/b.cu',\n"
             "], extra_compile_args={'nvcc': flags})])\n")
    files = {"setup.py": setup, "api.cpp": "int f();\n", "sm90/a.cu": "\n", "sm100/b.cu": "\n"}
    found = _by_rule(_scan(_tree(tmp_path / "two", files)), "FB221")
    assert [(f.line, f.severity.value) for f in found] == [(6, "warning")]
    one = {**files, "sm100/b.cu": "", "setup.py": setup.replace("'sm100/b.cu'", "'sm90/c.cu'"),
           "sm90/c.cu": "\n"}
    assert _by_rule(_scan(_tree(tmp_path / "one", one)), "FB221") == []


# --- CMake ----------------------------------------------------------------------------------------

_CMAKE = """cmake_minimum_required(VERSION 3.24)
project(p CUDA CXX)
if(NOT DEFINED GPU_ARCH)
  execute_process(COMMAND nvidia-smi --query-gpu=compute_cap --format=csv,noheader
                  OUTPUT_VARIABLE _cc RESULT_VARIABLE _rc)
  if(_rc EQUAL 0)
    string(REPLACE "." "" GPU_ARCH "${_cc}")
  else()
    set(GPU_ARCH "89")
  endif()
endif()
if(GPU_ARCH STREQUAL "100" OR GPU_ARCH STREQUAL "110")
  set(ENABLE_SM100 ON)
else()
  set(ENABLE_SM100 OFF)
endif()
if(GPU_ARCH STREQUAL "120" OR GPU_ARCH STREQUAL "120a")
  set(ENABLE_FP4 ON)
endif()
if(GPU_ARCH STREQUAL "90" OR GPU_ARCH STREQUAL "120")
  set(GENCODE "-gencode=arch=compute_${GPU_ARCH}a,code=sm_${GPU_ARCH}a")
else()
  set(GENCODE "-gencode=arch=compute_${GPU_ARCH},code=sm_${GPU_ARCH}")
endif()
if(ENABLE_SM100)
  add_library(plugin SHARED plugin.cu)
endif()
pybind11_add_module(kern main.cu)
target_compile_options(kern PRIVATE "SHELL:-Xcompiler -Wno-deprecated-declarations")
install(TARGETS kern DESTINATION ${CMAKE_CURRENT_SOURCE_DIR}/pkg)
"""


def _cmake_tree(root: Path) -> Path:
    return _tree(root, {
        "CMakeLists.txt": _CMAKE,
        "plugin.cu": "#include <dlfcn.h>\nextern \"C\" int entry() { return dlsym(0, \"x\") "
                     "!= 0; }\n",
        "main.cu": "__global__ void k() {}\n",
        "pkg/__init__.py": "from pkg.api import run\n",
        "pkg/api.py": "from pkg import kern\nimport ctypes\n"
                      "LIB = 'libplugin.so'\n",
    })


def test_cmake_switch_set_under_an_arch_gate_stands_for_it(tmp_path: Path) -> None:
    findings = _scan(_cmake_tree(tmp_path), "windows")
    # plugin.cu is built only for GPU_ARCH 100/110: its export is no sm_120 problem, and the
    # hard-coded libplugin.so is a note.
    assert _by_rule(findings, "FB102") == []
    assert [f.severity.value for f in _by_rule(findings, "FB182")] == ["note"]


def test_cmake_arch_gates_that_do_no_harm_are_not_flagged(tmp_path: Path) -> None:
    lines = sorted(f.line for f in _by_rule(_scan(_cmake_tree(tmp_path)), "FB152"))
    # "120" OR "120a" for a one-arch variable (17), and the suffix-picking if/else (20): fine.
    assert 17 not in lines
    assert 20 not in lines


def test_cmake_arch_from_nvidia_smi_with_a_fallback(tmp_path: Path) -> None:
    found = _by_rule(_scan(_cmake_tree(tmp_path)), "FB194")
    assert [(f.line, f.facts) for f in found] == \
        [(9, ArchFallbackFacts(variable="GPU_ARCH", fallback="89"))]


def test_cmake_gcc_warning_flag_through_xcompiler(tmp_path: Path) -> None:
    root = _cmake_tree(tmp_path)
    found = _by_rule(_scan(root, "windows"), "FB193")
    assert [(f.line, f.severity.value) for f in found] == [(29, "error")]
    assert _by_rule(_scan(root, "linux"), "FB193") == []
    guarded = _CMAKE.replace('target_compile_options(kern PRIVATE "SHELL:',
                             'target_compile_options(kern PRIVATE $<$<NOT:$<CXX_COMPILER_ID:'
                             'MSVC>>:"SHELL:').replace('declarations")', 'declarations">)')
    (root / "CMakeLists.txt").write_text(guarded, encoding="utf-8")
    assert _by_rule(_scan(root, "windows"), "FB193") == []


def test_package_holding_a_cmake_built_module_needs_dll_directories(tmp_path: Path) -> None:
    root = _cmake_tree(tmp_path)
    found = _by_rule(_scan(root, "windows"), "FB181")
    assert [(f.path, f.facts) for f in found] == [("pkg/__init__.py",
                                                   ExtensionImportFacts(module="kern"))]
    (root / "pkg" / "__init__.py").write_text(
        "import os\nos.add_dll_directory('.')\nfrom pkg.api import run\n", encoding="utf-8")
    assert _by_rule(_scan(root, "windows"), "FB181") == []


def test_disable_switch_for_an_arch_keeps_that_arch_s_gencode() -> None:
    text = ("import os\nfrom setuptools import setup\n"
            "from torch.utils.cpp_extension import CUDAExtension\n"
            "def flag(name):\n    return os.getenv(name, 'FALSE').lower() in ['1', 'true']\n"
            "DISABLE_SM100 = flag('X_DISABLE_SM100')\nDISABLE_SM90 = flag('X_DISABLE_SM90')\n"
            "cc = []\nif not DISABLE_SM100:\n"
            "    cc.extend(['-gencode', 'arch=compute_100f,code=sm_100f'])\n"
            "if not DISABLE_SM90:\n    cc.extend(['-gencode', 'arch=compute_90a,code=sm_90a'])\n"
            "setup(ext_modules=[CUDAExtension(name='m', sources=['a.cu'], "
            "extra_compile_args={'nvcc': cc})])\n")
    for arch in ("sm_90a", "sm_100f", "sm120"):
        setup = analyze_setup(text, "setup.py", platform="linux",
                              archs=parse_arch_spec(arch).archs, files=["setup.py", "a.cu"])
        assert setup is not None
        assert "arch=compute_90a,code=sm_90a" in setup.extensions[0].nvcc_flags, arch
        assert "arch=compute_100f,code=sm_100f" in setup.extensions[0].nvcc_flags, arch


def test_without_a_toolkit_the_static_reader_decides_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flashbuild.scanning import truth

    monkeypatch.setattr(truth, "find_toolchain", lambda: None)
    root = _tree(tmp_path, {
        "setup.py": ("from setuptools import setup\n"
                     "from torch.utils.cpp_extension import CUDAExtension\n"
                     "setup(name='m', version='1', ext_modules=[CUDAExtension(name='m', "
                     "sources=['k.cu'])])\n"),
        "k.cu": f"__global__ void k(unsigned b) {{ {_ASM} }}\n"})
    result = scan_tree(root, make_target("linux", "sm120"), ScanOptions(compile="never"))
    assert result.truth.startswith("static reading: no CUDA toolkit with nvcc was found")
    assert [(f.severity.value, f.truth.value) for f in result.findings if f.rule == "FB160"] \
        == [("error", "static")]


def test_a_cmake_file_for_ide_indexing_leaves_the_build_to_setup_py(tmp_path: Path) -> None:
    setup = ("from setuptools import setup\nfrom torch.utils.cpp_extension import "
             "CUDAExtension\nsetup(name='m', version='1', ext_modules=[CUDAExtension(name='m', "
             "sources=['k.cu'], extra_compile_args={'nvcc': ['-gencode', "
             "'arch=compute_90a,code=sm_90a']})])\n")
    files = {"setup.py": setup, "k.cu": "__global__ void k() {}\n",
             "CMakeLists.txt": "# For IDE indexing only (CLion); the build is setup.py.\n"
                               "cmake_minimum_required(VERSION 3.24)\nproject(m CUDA CXX)\n"}
    ide = _by_rule(_scan(_tree(tmp_path / "ide", files)), "FB220")
    assert [f.path for f in ide] == ["setup.py"]
    # A CMakeLists.txt that builds the module is the build (one that defines no target loses
    # to the torch extension: buildsystems.detect).
    real = {**files, "CMakeLists.txt": "cmake_minimum_required(VERSION 3.24)\n"
                                       "project(m CUDA CXX)\nadd_library(m MODULE k.cu)\n"}
    assert _by_rule(_scan(_tree(tmp_path / "real", real)), "FB220") == []
