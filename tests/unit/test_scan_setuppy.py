"""setup.py read with ast (`source.setuppy`), what the scan then leaves out (reachability,
vendored code), the setup.py rules, and the grouped report. Small trees written to tmp_path."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from flashbuild.arch import parse_arch_spec
from flashbuild.scanning.facts import InstructionFacts
from flashbuild.scanning.findings import ScanOptions, make_target
from flashbuild.scanning.report import print_report
from flashbuild.scanning.scan import scan_tree
from flashbuild.source.setuppy import analyze_setup

SM120 = parse_arch_spec("sm120").archs

PER_ARCH = '''
import os, sys
from setuptools import setup, find_packages
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

HAS_SM90 = False
HAS_SM120 = False
caps = set()
for item in os.getenv("TORCH_CUDA_ARCH_LIST", "").split(";"):
    caps.add(item)
for cap in caps:
    if cap.startswith("9.0"):
        HAS_SM90 = True
    elif cap.startswith("12.0"):
        HAS_SM120 = True

NVCC_FLAGS = ["-O3", "--use_fast_math"]
CXX_FLAGS = ["-O3", "-fopenmp"]
ext_modules = []
if HAS_SM90:
    ext_modules.append(CUDAExtension(
        name="pkg._sm90", sources=["csrc/k_sm90.cu"],
        extra_compile_args={"cxx": CXX_FLAGS, "nvcc": NVCC_FLAGS}))
if HAS_SM90 or HAS_SM120:
    ext_modules.append(CUDAExtension(
        name="pkg._common", sources=["csrc/bind.cpp", "csrc/k.cu"],
        extra_compile_args={"cxx": CXX_FLAGS, "nvcc": NVCC_FLAGS}))
if os.environ.get("BUILD_TARGET") == "rocm":
    ext_modules.append(CUDAExtension(name="pkg._hip", sources=["csrc/hip/k.cu"]))
setup(name="pkg", packages=find_packages(exclude=("tests",)), ext_modules=ext_modules,
      cmdclass={"build_ext": BuildExtension})
'''

FILES = {
    "setup.py": PER_ARCH,
    "pkg/__init__.py": "from . import _common\n",
    "csrc/bind.cpp": "#include <torch/extension.h>\n#include \"k.h\"\n",
    "csrc/k.h": "#pragma once\nint k();\n",
    "csrc/k.cu": "#include \"k.h\"\n#include \"util.cuh\"\n__global__ void g() {}\n",
    "csrc/util.cuh": "#pragma once\n#include <torch/extension.h>\n",
    # Only the sm90 extension compiles these: wgmma must not be reported for sm_120.
    "csrc/k_sm90.cu": "#include \"wgmma.cuh\"\n",
    "csrc/wgmma.cuh": "__device__ void f() { asm volatile(\"wgmma.fence.sync.aligned;\"); }\n",
    "csrc/hip/k.cu": "__device__ int f(int x) { return __builtin_amdgcn_readfirstlane(x); }\n",
    # A second project with its own setup.py: not built by the top-level one.
    "sub/setup.py": "from setuptools import setup\nsetup(name='sub')\n",
    "sub/k.cu": "__device__ void f() { asm volatile(\"tcgen05.fence::before_thread_sync;\"); }\n",
    "tools/helper.py": "import ctypes\nctypes.CDLL('libcudart.so')\n",
    "pyproject.toml": "[build-system]\nrequires = [\"setuptools\", \"wheel\"]\n",
}


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_extensions_with_their_conditions(tmp_path: Path) -> None:
    root = _tree(tmp_path, FILES)
    setup = analyze_setup(PER_ARCH, "setup.py", platform="linux", archs=SM120,
                          files=_files(root))
    assert setup is not None
    built = {e.name: e.built for e in setup.extensions}
    # HAS_SM90 is unknown (it depends on TORCH_CUDA_ARCH_LIST): its SM number decides it.
    assert built == {"pkg._sm90": "no", "pkg._common": "yes", "pkg._hip": "no"}
    common = next(e for e in setup.extensions if e.name == "pkg._common")
    assert common.sources == ("csrc/bind.cpp", "csrc/k.cu")
    assert common.nvcc_flags == ("-O3", "--use_fast_math")
    assert common.condition == "HAS_SM90 or HAS_SM120"
    assert setup.packages == ("pkg",)
    assert [n for n, _line in setup.env_switches] == ["TORCH_CUDA_ARCH_LIST", "BUILD_TARGET"]
    assert setup.uses_cpp_extension and not setup.gencode


def test_sm90_target_builds_the_sm90_extension(tmp_path: Path) -> None:
    root = _tree(tmp_path, FILES)
    setup = analyze_setup(PER_ARCH, "setup.py", platform="linux",
                          archs=parse_arch_spec("sm_90a").archs, files=_files(root))
    assert setup is not None
    assert {e.name: e.built for e in setup.extensions}["pkg._sm90"] == "yes"


def test_globs_set_differences_and_platform_branches(tmp_path: Path) -> None:
    text = '''
import glob, os, sys
from torch.utils.cpp_extension import CUDAExtension, CppExtension
d = os.path.join("lib", "csrc")
sources = glob.glob(os.path.join(d, "**", "*.cu"), recursive=True)
hip = glob.glob(os.path.join(d, "hip_*", "**", "*.cu"), recursive=True)
sources = list(set(sources) - set(hip))
flags = ["-O3"]
if sys.platform == "win32":
    flags += ["-Xcompiler", "/Zc:preprocessor"]
ext = CppExtension
if os.getenv("FORCE_CUDA", "0") == "1":
    ext = CUDAExtension
modules = [ext(name="lib._C", sources=sorted(sources), extra_compile_args={"nvcc": flags})]
'''
    files = ["lib/csrc/a.cu", "lib/csrc/sub/b.cu", "lib/csrc/hip_fmha/c.cu", "setup.py"]
    win = analyze_setup(text, "setup.py", platform="windows", archs=SM120, files=files)
    lin = analyze_setup(text, "setup.py", platform="linux", archs=SM120, files=files)
    assert win is not None and lin is not None
    assert win.extensions[0].sources == ("lib/csrc/a.cu", "lib/csrc/sub/b.cu")
    assert win.extensions[0].nvcc_flags == ("-O3", "-Xcompiler", "/Zc:preprocessor")
    assert lin.extensions[0].nvcc_flags == ("-O3",)
    assert [(flag, cond) for _l, flag, cond in win.windows_flags][-1] == (
        "/Zc:preprocessor", "sys.platform == 'win32'")


def test_a_join_over_absolute_glob_results_keeps_them(tmp_path: Path) -> None:
    """DCNv2's setup.py globs under `this_dir` (absolute at run time, from __file__) and joins
    its folder to each result again: the absolute result wins in Python. Read tree-relative,
    the join made `src/src/vision.cpp`, a file the tree lacks, so every source counted as not
    compiled and the Windows scan found nothing in src/ (the Linux record had found THC in
    all of it)."""
    text = '''
import glob, os
from torch.utils.cpp_extension import CUDAExtension
this_dir = os.path.dirname(os.path.abspath(__file__))
extensions_dir = os.path.join(this_dir, "src")
sources = glob.glob(os.path.join(extensions_dir, "*.cpp")) + glob.glob(
    os.path.join(extensions_dir, "cuda", "*.cu"))
sources = [os.path.join(extensions_dir, s) for s in sources]
ext = CUDAExtension("_ext", sources)
'''
    files = ["setup.py", "src/vision.cpp", "src/cuda/k.cu"]
    setup = analyze_setup(text, "setup.py", platform="windows", archs=SM120, files=files)
    assert setup is not None
    assert setup.extensions[0].sources == ("src/vision.cpp", "src/cuda/k.cu")
    # A tree that does have the nested folder keeps the plain join.
    nested = ["setup.py", "src/src/vision.cpp", "src/vision.cpp"]
    text2 = '''
import os
from torch.utils.cpp_extension import CUDAExtension
ext = CUDAExtension("_ext", [os.path.join("src", "src/vision.cpp")])
'''
    setup = analyze_setup(text2, "setup.py", platform="linux", archs=SM120, files=nested)
    assert setup is not None and setup.extensions[0].sources == ("src/src/vision.cpp",)


def test_hard_coded_gencode_and_downloads() -> None:
    text = '''
import urllib.request
from torch.utils.cpp_extension import CUDAExtension
cc = []
cc += ["-gencode", "arch=compute_80,code=sm_80"]
cc += ["-gencode", "arch=compute_90,code=sm_90"]
arch = "100"
cc += ["-gencode", f"arch=compute_{arch},code=sm_{arch}"]
CUDAExtension("m", ["k.cu"], extra_compile_args={"nvcc": cc})
urllib.request.urlretrieve("https://example.invalid/w.whl", "w.whl")
'''
    setup = analyze_setup(text, "setup.py", platform="linux", archs=SM120, files=["k.cu"])
    assert setup is not None
    # The f-string is not a literal: only the two hard-coded entries count.
    assert [lit for _l, lit in setup.gencode] == ["arch=compute_80,code=sm_80",
                                                  "arch=compute_90,code=sm_90"]
    assert setup.downloads == ((10, "urllib.request.urlretrieve(...)"),)
    assert setup.extensions[0].nvcc_flags[-1] == "arch=compute_100,code=sm_100"


def test_scan_checks_only_what_the_build_compiles(tmp_path: Path) -> None:
    root = _tree(tmp_path, FILES)
    result = scan_tree(root, make_target("linux", "sm120"))
    keys = [(f.rule, f.path) for f in result.findings]
    # wgmma.cuh (sm90 extension only), sub/ (its own setup.py), csrc/hip (ROCm branch) and
    # tools/ (not a shipped package) hold nothing that breaks the sm_120 build.
    assert not [k for k in keys if k[0] in ("FB160", "FB121", "FB180")], keys
    notes: dict[str, str] = {}
    for s in result.skipped:
        notes[s.path] = notes.get(s.path, "") + s.reason
    assert "not compiled for the target" in notes["csrc"]
    assert "not compiled for the target" in notes["sub"]
    assert "Python outside the packages" in notes["tools"]
    assert result.setup is not None


def test_windows_setup_rules(tmp_path: Path) -> None:
    root = _tree(tmp_path, FILES)
    result = scan_tree(root, make_target("windows", "sm120"))
    by_rule = {f.rule: f for f in result.findings}
    zc = by_rule["FB200"]
    assert (zc.path, zc.line, zc.severity.value, zc.category.value) == (
        "setup.py", 17, "error", "setup-flags")
    th = by_rule["FB210"]
    # k.cu pulls torch/extension.h in through util.cuh (its line 2 include).
    assert (th.path, th.line, th.severity.value, th.category.value) == (
        "csrc/k.cu", 2, "error", "torch-headers")
    assert by_rule["FB202"].severity.value == "warning"  # cl only warns D9002
    assert by_rule["FB231"].path == "pyproject.toml"
    assert "FB220" not in by_rule


def test_use_cuda_and_zc_preprocessor_present_are_quiet(tmp_path: Path) -> None:
    fixed = PER_ARCH.replace(
        'NVCC_FLAGS = ["-O3", "--use_fast_math"]',
        'NVCC_FLAGS = ["-O3", "--use_fast_math"]\n'
        'if sys.platform == "win32":\n'
        '    NVCC_FLAGS += ["-Xcompiler", "/Zc:preprocessor", "-DUSE_CUDA"]')
    root = _tree(tmp_path, {**FILES, "setup.py": fixed})
    rules = {f.rule for f in scan_tree(root, make_target("windows", "sm120")).findings}
    assert not rules & {"FB200", "FB210"}, rules


def test_vendored_by_gitmodules_and_by_content(tmp_path: Path) -> None:
    cutlass = "__device__ void f() { asm volatile(\"wgmma.fence.sync.aligned;\"); }\n"
    root = _tree(tmp_path, {
        "CMakeLists.txt": "project(x LANGUAGES CXX CUDA)\nadd_library(x SHARED src/a.cu)\n",
        "src/a.cu": "__global__ void g() {}\n",
        ".gitmodules": "[submodule \"deps/lib\"]\n\tpath = deps/lib\n\turl = x\n",
        "deps/lib/k.cu": cutlass,
        # A CUTLASS copy deep in the tree, neither a submodule nor under third_party/.
        "src/kernels/cutlass/include/cutlass/cutlass.h": "#pragma once\n",
        "src/kernels/cutlass/include/cute/arch/mma_sm90.hpp": cutlass,
    })
    result = scan_tree(root, make_target("linux", "sm120"))
    assert not [f for f in result.findings if f.rule == "FB160"]
    reasons = {s.path: s.reason for s in result.skipped}
    assert reasons["deps/lib"].startswith("vendored (git submodule in .gitmodules): 1 file, ")
    assert reasons["src/kernels/cutlass"].startswith("vendored (a copy of CUTLASS): 2 files")
    assert set(result.vendored) == {"deps/lib", "src/kernels/cutlass"}
    full = scan_tree(root, make_target("linux", "sm120"), ScanOptions(include_vendored=True))
    assert {f.path for f in full.findings if f.rule == "FB160"} == {
        "deps/lib/k.cu", "src/kernels/cutlass/include/cute/arch/mma_sm90.hpp"}


def test_undecidable_instruction_is_a_note_naming_the_macro(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"k.cu": (
        "#if defined(LIB_ARCH_SM100_ENABLED)\n"
        "__device__ void f() { asm volatile(\"tcgen05.fence::before_thread_sync;\"); }\n"
        "#endif\n")})
    found = [f for f in scan_tree(root, make_target("linux", "sm120")).findings
             if f.rule == "FB160"]
    assert [(f.severity.value, f.line) for f in found] == [("note", 2)]
    assert "LIB_ARCH_SM100_ENABLED" in found[0].message


def test_sm120_family_instruction_table(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"k.cu": (
        "__device__ void f() { asm volatile(\"setmaxnreg.inc.sync.aligned.u32 240;\"); }\n"
        "__device__ void g() { asm volatile(\"mma.sync.aligned.m16n8k64.row.col."
        "kind::mxf4nvf4.block_scale.scale_vec::2X.f32.e2m1.e2m1.f32.ue8m0 ...;\"); }\n")})

    def fb160(arch: str) -> list[tuple[int, str]]:
        return [(f.line, f.facts.instruction) for f in
                scan_tree(root, make_target("linux", arch)).findings
                if isinstance(f.facts, InstructionFacts)]

    assert fb160("sm_120a") == []
    assert fb160("sm_120f") == []
    assert fb160("sm120") == [(1, "setmaxnreg"), (2, "kind::mxf4nvf4")]
    assert fb160("sm_100a") == [(2, "kind::mxf4nvf4")]


def test_report_groups_repeats_and_collapses_notes(tmp_path: Path) -> None:
    lines = "".join(f"__device__ void f{i}() {{ asm volatile(\"wgmma.fence.sync.aligned;\"); }}\n"
                    for i in range(5))
    deep = "a_really_long_folder_name_that_would_wrap/" * 3
    root = _tree(tmp_path, {f"{deep}k.cu": lines, "n.cu": (
        "#ifdef X\n__device__ void f() { asm volatile(\"tcgen05.fence::before_thread_sync;\");"
        " }\n#endif\n#ifdef Y\n__device__ void g() { asm volatile(\"tcgen05.wait::ld;\"); }\n"
        "#endif\n")})
    result = scan_tree(root, make_target("linux", "sm120"))
    buf = io.StringIO()
    print_report(result, Console(file=buf, width=60, color_system=None))
    out = buf.getvalue()
    # The location comes first and whole, even past the console width.
    assert f"\n{deep}k.cu:1:" in out
    assert "also FB160 in this file at lines 2, 3, 4, 5" in out
    assert out.count("error FB160") == 1
    assert "FB160 x2 in 1 file:" in out


def test_cmake_gate_naming_both_spellings_accepts_the_a_target(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"CMakeLists.txt": (
        "project(x LANGUAGES CXX CUDA)\n"
        "if(GPU_ARCH STREQUAL \"120\" OR GPU_ARCH STREQUAL \"120a\")\n"
        "  add_library(x SHARED k.cu)\nendif()\n"), "k.cu": "__global__ void g() {}\n"})
    lines = {f.line for f in scan_tree(root, make_target("linux", "sm_120a")).findings
             if f.rule == "FB152"}
    # Only the exact-string caveat of the "120a" comparison, not "120a is not 120".
    found = [f.message for f in scan_tree(root, make_target("linux", "sm_120a")).findings
             if f.rule == "FB152"]
    assert lines <= {2} and not [m for m in found if "is false for" in m], found


def test_plugin_exports_through_a_macro_or_internal_are_not_fb102(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "CMakeLists.txt": "project(x LANGUAGES CXX)\nadd_library(plug SHARED plug.cpp)\n"
                          "add_library(host SHARED host.cpp)\n",
        "host.cpp": "#include <dlfcn.h>\nvoid* load(void* h) { return dlsym(h, \"run\"); }\n",
        "plug_api.h": "#define PLUG_API __declspec(dllexport)\n"
                      "extern \"C\" PLUG_API int run(int);\n",
        "plug.cpp": "#include \"plug_api.h\"\n"
                    "extern \"C\" int run(int x) { return x; }\n"
                    "namespace {\nextern \"C\" int helper(int x) { return x; }\n}\n"
                    "extern \"C\" int plain(int x) { return x; }\n",
    })
    found = [(f.path, f.line) for f in scan_tree(root, make_target("windows", "sm120")).findings
             if f.rule == "FB102"]
    assert found == [("plug.cpp", 6)]


def test_macros_resolved_across_headers(tmp_path: Path) -> None:
    use = ("#include \"config/arch.h\"\n#ifdef LIB_HAS_WGMMA\n"
           "__device__ void f() { asm volatile(\"wgmma.fence.sync.aligned;\"); }\n#endif\n")
    exact = ("#pragma once\n#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && "
             "defined(__CUDA_ARCH_FEAT_SM90_ALL)\n#define LIB_HAS_WGMMA 1\n#endif\n")
    ladder = exact.replace("__CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)",
                           "__CUDA_ARCH__ >= 900")

    def fb160(header: str | None) -> list[str]:
        root = tmp_path / str(len(list(tmp_path.iterdir())))
        files = {"src/k.cu": use}
        if header is not None:
            files["src/config/arch.h"] = header
        _tree(root, files)
        return [f.severity.value for f in scan_tree(root, make_target("linux", "sm120")).findings
                if f.rule == "FB160"]

    assert fb160(exact) == []  # the header defines it for sm_90a only
    assert fb160(ladder) == ["error"]  # ... or for every arch from 9.0 on, sm_120 included
    assert fb160(None) == ["note"]  # defined nowhere the scan sees: undecidable


def test_blackwell_range_that_ends_before_the_target(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"k.cu": (
        "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000 && __CUDA_ARCH__ < 1200\n"
        "__device__ int tile() { return 128; }\n#else\n__device__ int tile() { return 64; }\n"
        "#endif\n#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && __CUDA_ARCH__ < 900\n"
        "__device__ int old() { return 1; }\n#endif\n")})
    found = [(f.rule, f.line, f.severity.value) for f in
             scan_tree(root, make_target("linux", "sm120")).findings]
    # The Ampere-only range is not about the target's generation: not reported.
    assert found == [("FB151", 1, "warning")]
    assert scan_tree(root, make_target("linux", "sm_100a")).findings == ()


def test_compile_check_verdicts_with_a_replayed_nvcc(tmp_path: Path) -> None:
    from flashbuild.proc import Completed
    from flashbuild.scanning.compilecheck import StepEdit, check_steps
    from tests.fakes import ReplayRunner

    root = _tree(tmp_path / "t", {
        "gate.h": "#if __CUDA_ARCH__ == 900\n#define OK 1\n#else\n#error no\n#endif\n",
        "k.cu": "#include \"gate.h\"\n",
        "other.cu": "#include <torch/extension.h>\nint x;\n",
    })

    def nvcc(argv: tuple[str, ...]) -> Completed:
        # A stand-in compiler: reads the unit and the header it includes from the mirror.
        unit = Path(argv[-1])
        text = unit.read_text(encoding="utf-8")
        if "torch/extension.h" in text:
            return Completed(argv, 1, "", "fatal error: torch/extension.h: No such file or "
                             "directory")
        gate = (unit.parent / "gate.h").read_text(encoding="utf-8")
        ok = "1200" in gate or ("BROKEN" not in gate and "== 900\n" not in gate)
        return Completed(argv, 0 if ok else 1, "", "" if ok else "gate.h:4: error: #error no")

    runner = ReplayRunner(responses={("nvcc",): nvcc})
    gate = (root / "gate.h").read_text(encoding="utf-8")
    edits = [
        StepEdit("widen", "macro-edit", {"gate.h": gate.replace(
            "== 900", "== 900 || __CUDA_ARCH__ == 1200")}),
        StepEdit("torch", "macro-edit", {"other.cu": "#include <torch/extension.h>\nint y;\n"}),
        StepEdit("guard", "explicit-instantiations", {"k.cu": "// guarded\n"}),
    ]
    arch = parse_arch_spec("sm120").archs[0]
    includers = {"gate.h": ["k.cu"]}
    verdicts = {v.step_id: (v.status, v.unit) for v in check_steps(
        root, edits, nvcc=Path("/x/nvcc"), arch=arch, runner=runner, includers=includers)}
    # The header step is checked through the unit that includes it; a unit whose includes
    # are missing here is not checked; non-code transforms are not compile-checked.
    assert verdicts == {"widen": ("fixed", "k.cu"), "torch": ("unchecked", "other.cu")}
    broken = [StepEdit("break", "insert-block", {"gate.h": gate + "BROKEN\n"})]
    (v,) = check_steps(root, broken, nvcc=Path("/x/nvcc"), arch=arch, runner=runner,
                       includers=includers)
    assert v.status == "fails" and "REVIEW" in v.comment("nvcc 13.0", "sm_120")


def test_long_object_path_fix_is_a_short_folder_not_long_paths(tmp_path: Path) -> None:
    # Issue 20: LongPathsEnabled does not lift the limit for cl.exe, link.exe and nvcc, so the
    # fix must not send the user to the registry.
    deep = "csrc/" + "/".join(["a_rather_long_folder_name"] * 9) + "/k.cu"
    files = FILES | {deep: FILES["csrc/k.cu"],
                     "setup.py": PER_ARCH.replace('"csrc/k.cu"]', f'"{deep}"]')}
    try:
        root = _tree(tmp_path, files)
    except OSError:  # pragma: no cover - a Windows with long paths off cannot hold the tree
        pytest.skip("this machine cannot create a path that long")
    result = scan_tree(root, make_target("windows", "sm120"))
    (long,) = [f for f in result.findings if f.rule == "FB232"]
    assert long.path == deep
    assert "short folder" in long.fix.manual and "does not help" in long.fix.manual


def test_a_host_compiled_cpp_reaching_cutlass_or_cccl_is_fb222(tmp_path: Path) -> None:
    # FlashMLA's csrc/api/api.cpp: g++ compiles it, a header of the tree includes CUTLASS,
    # which includes <cuda/std/utility> (CUDA 13: include/cccl, not given to g++ by torch).
    files = {**FILES,
             "csrc/bind.cpp": "#include <torch/extension.h>\n#include \"k.h\"\n"
                              "#include \"api.h\"\n",
             "csrc/api.h": "#pragma once\n#include \"cutlass/numeric_types.h\"\n",
             "csrc/cutlass/numeric_types.h": "#pragma once\n#include <cuda/std/utility>\n"}
    root = _tree(tmp_path, files)
    found = [f for f in scan_tree(root, make_target("linux", "sm120"),
                                  ScanOptions(static=True)).findings if f.rule == "FB222"]
    assert len(found) == 1
    assert "cuda/std/utility" in found[0].message
    assert "csrc/bind.cpp" in found[0].message
    assert "CPLUS_INCLUDE_PATH" in found[0].fix.manual


def test_cccl_in_cu_files_or_the_trees_own_cuda_folder_is_not_fb222(tmp_path: Path) -> None:
    files = {**FILES,
             # nvcc compiles .cu files and adds include/cccl itself.
             "csrc/k.cu": "#include \"k.h\"\n#include <cub/cub.cuh>\n__global__ void g() {}\n",
             # A folder of the tree's own named cuda/ is not CCCL.
             "csrc/bind.cpp": "#include \"k.h\"\n#include \"cuda/helpers.h\"\n",
             "csrc/cuda/helpers.h": "#pragma once\n"}
    root = _tree(tmp_path, files)
    rules = {f.rule for f in scan_tree(root, make_target("linux", "sm120"),
                                       ScanOptions(static=True)).findings}
    assert "FB222" not in rules


OTHER_STACKS = '''
import os, torch
from setuptools import setup
from torch.utils.cpp_extension import CUDAExtension, CppExtension
is_rocm = torch.version.hip is not None
if torch.cuda.is_available() or is_rocm or os.getenv('FORCE_CUDA', '0') == '1':
    files = ['csrc/cuda.cu']
elif (hasattr(torch, 'is_mlu_available') and torch.is_mlu_available()) or \\
        os.getenv('FORCE_MLU', '0') == '1':
    files = ['csrc/mlu.cpp']
elif torch.backends.mps.is_available():
    files = ['csrc/mps.cpp']
elif os.getenv('FORCE_NPU', '0') == '1':
    files = ['csrc/npu.cpp']
else:
    files = ['csrc/cpu.cpp']
if BACKEND != "rocm":
    files += ['csrc/not_rocm.cu']
setup(name='pkg', ext_modules=[CUDAExtension('pkg._C', files)])
'''


def test_branches_of_other_accelerator_stacks_are_not_built_for_cuda(tmp_path: Path) -> None:
    """mmcv's shape: a CUDA branch (which also names ROCm: still maybe), then MLU, MPS and
    NPU branches that a CUDA build never takes, then the CPU fallback."""
    files = ["csrc/cuda.cu", "csrc/mlu.cpp", "csrc/mps.cpp", "csrc/npu.cpp", "csrc/cpu.cpp",
             "csrc/not_rocm.cu"]
    setup = analyze_setup(OTHER_STACKS, "setup.py", platform="windows", archs=SM120,
                          files=files)
    assert setup is not None
    (ext,) = setup.extensions
    assert ext.sources == ("csrc/cuda.cu", "csrc/cpu.cpp", "csrc/not_rocm.cu")


@pytest.mark.parametrize(("word", "other"), [
    ("IS_ROCM", True), ("is_mlu_available", True), ("torch_npu", True), ("HIP_HOME", True),
    ("MMCV_WITH_DIOPI", True), ("XPUExtension", True), ("hipify_extension", True),
    ("ship", False), ("is_shipped", False), ("chip_count", False), ("BUILD_CUDA_EXT", False),
    ("HAS_SM90", False), ("cpu", False)])
def test_words_that_name_another_stack(word: str, other: bool) -> None:
    from flashbuild.source.setuppy import names_other_stack

    assert names_other_stack(word) is other


@pytest.mark.parametrize(("files", "nothing"), [
    # gptqmodel 7.7's setup.py: packages only; its kernels are compiled at run time.
    ({"setup.py": "from setuptools import setup, find_packages\n"
                  "setup(version='1', packages=find_packages())\n"}, True),
    ({"setup.py": '"""Builds no Extension: see jit/."""\nfrom setuptools import setup\n'
                  "setup(name='x')\n"}, True),
    ({"setup.py": "from setuptools import setup\nsetup(**kwargs)\n"}, False),
    ({"setup.py": "from setuptools import setup\nkw = {'ext_modules': mods}\nsetup(name='x')\n"},
     False),
    ({"setup.py": "from setuptools import setup\nsetup(name='x', cmdclass={'install': I})\n"},
     False),
    ({"setup.py": "setup(\n"}, False),
    ({"setup.py": "from setuptools import setup\nsetup(name='x')\n", "CMakeLists.txt": ""},
     False),
    # optimum-quanto: pyproject.toml only, setuptools, no ext-modules.
    ({"pyproject.toml": "[build-system]\nrequires = ['setuptools']\n"
                        "build-backend = 'setuptools.build_meta'\n"}, True),
    ({"pyproject.toml": '[build-system]\nbuild-backend = "hatchling.build"\n'}, True),
    ({"pyproject.toml": '[build-system]\nbuild-backend = "scikit_build_core.build"\n'}, False),
    ({"pyproject.toml": '[build-system]\nbuild-backend = "setuptools.build_meta"\n'
                        '[tool.setuptools]\next-modules = [{name = "x", sources = ["x.c"]}]\n'},
     False),
    ({}, False),
])
def test_a_build_that_compiles_nothing_is_recognised(files: dict[str, str],
                                                      nothing: bool) -> None:
    from flashbuild.source.setuppy import builds_nothing

    assert bool(builds_nothing(list(files), files.get)) is nothing


def test_a_pure_python_tree_that_compiles_at_run_time_is_not_assumed_compiled(
        tmp_path: Path) -> None:
    """gptqmodel's shape, statically (a Windows target reads the text): no extension in
    setup.py, kernels loaded with cpp_extension.load; no finding on the kernels, and the
    note says where they are compiled."""
    root = _tree(tmp_path, {
        "setup.py": "from setuptools import setup\nsetup(name='jitpkg', packages=['jitpkg'])\n",
        "jitpkg/__init__.py": "",
        "jitpkg/ops.py": "from torch.utils.cpp_extension import load\n"
                         "mod = load('k', ['kernels/k.cu'], extra_cuda_cflags=['-O3'])\n",
        "kernels/k.cu": "#include <dlfcn.h>\n__global__ void k() {\n"
                        "  asm volatile(\"wgmma.fence.sync.aligned;\");\n}\n",
        "kernels/inst.cu": "template <typename T> __global__ void g(T* x) {}\n"
                           "template __global__ void g<float>(float*);\n"})
    result = scan_tree(root, make_target("windows", "sm120"), ScanOptions(static=True))
    assert [f.rule for f in result.findings if f.path.startswith("kernels/")] == []
    (note,) = [s for s in result.skipped if s.path == "kernels"]
    assert "setup.py names no extension module" in note.reason
    assert "jitpkg/ops.py:2 torch.utils.cpp_extension.load" in note.reason


@pytest.mark.parametrize(("header", "cccl"), [
    ("cuda/std/utility", True), ("cuda/atomic", True), ("cuda/ptx", True),
    ("cuda/__cccl_config", True), ("cub/cub.cuh", True), ("thrust/device_vector.h", True),
    ("nv/target", True),
    # auto-gptq's exllamav2: `#include "cuda/q_matrix.cuh"`, a file of the tree (absent from
    # its sdist). Not CCCL's, so no FB222.
    ("cuda/q_matrix.cuh", False), ("cuda/helpers.h", False), ("cuda_runtime.h", False)])
def test_which_headers_are_cccl(header: str, cccl: bool) -> None:
    from flashbuild.source.hostinclude import is_cccl_header

    assert is_cccl_header(header) is cccl


TORCH_SCATTER_CMAKE = """cmake_minimum_required(VERSION 3.0)
project(torchscatter)
add_library(${PROJECT_NAME} SHARED ${OPERATOR_SOURCES})
configure_package_config_file(cmake/TorchScatterConfig.cmake.in
  "${CMAKE_CURRENT_BINARY_DIR}/TorchScatterConfig.cmake")
install(EXPORT TorchScatterTargets NAMESPACE TorchScatter::)
"""


@pytest.mark.parametrize(("cmake", "setup", "setup_wins"), [
    # PyG's torch_scatter: the CMake build packages the C++ API; pip builds setup.py's
    # torch extensions.
    (TORCH_SCATTER_CMAKE, "from torch.utils.cpp_extension import CUDAExtension\n", True),
    # The same CMake file beside a setup.py that builds no torch extension: CMake builds.
    (TORCH_SCATTER_CMAKE, "from setuptools import setup\nsetup(name='x')\n", False),
    # A CMake build of a plugin the Python package loads (no package config): CMake builds.
    ("project(fastops LANGUAGES CXX CUDA)\nadd_library(p SHARED p.cpp)\n",
     "from torch.utils.cpp_extension import CUDAExtension\n", False),
    ("# This file is only for IDE indexing (CLion); build with setup.py\nproject(x)\n",
     "from setuptools import setup\n", True),
    # vllm's shape: setup.py's build_ext configures this CMakeLists.txt itself.
    ("project(vllm LANGUAGES CXX CUDA)\nadd_library(_C MODULE csrc/ops.cu)\n",
     "import subprocess\nfrom setuptools.command.build_ext import build_ext\n"
     "class cmake_build_ext(build_ext):\n"
     "    def run(self):\n"
     "        args = [f'-DCMAKE_BUILD_TYPE={cfg}']\n"
     "        subprocess.check_call(['cmake', src, *args])\n", True),
    # FlashRT's shape: `cmake ..` only in setup.py's docstring; CMake is the build.
    ("project(flash_vla LANGUAGES CXX CUDA)\n",
     '"""Build first:\n    cmake .. && make -j$(nproc) && make install\n"""\n'
     "from setuptools import setup\nsetup(name='flash_vla')\n", False),
])
def test_which_build_a_tree_with_cmake_and_setup_py_uses(cmake: str, setup: str,
                                                         setup_wins: bool,
                                                         tmp_path: Path) -> None:
    from flashbuild.scanning.scan import build_system

    root = _tree(tmp_path, {"CMakeLists.txt": cmake, "setup.py": setup})
    system = build_system(root)
    assert system is not None
    assert system.name == ("setuptools" if setup_wins else "cmake")


def test_the_package_folder_of_a_src_layout() -> None:
    from flashbuild.scanning.draft import package_folder

    files = ["setup.py", "src/natten/__init__.py", "src/natten/ops.py", "tests/natten/x.py"]
    assert package_folder("natten", files) == "src/natten"
    assert package_folder("pkg.sub", ["pkg/__init__.py", "pkg/sub/__init__.py"]) == "pkg/sub"
    assert package_folder("missing", files) is None


def test_a_library_the_tree_writes_itself_at_run_time_is_a_note(tmp_path: Path) -> None:
    """DeepGEMM's JIT cache: one module runs nvcc `-o {path}/kernel.so`, another lists
    `kernel.so` among the cached files; a `.so` the tree loads that it never writes is still
    an error."""
    root = _tree(tmp_path, {
        "setup.py": "from setuptools import setup\nsetup(name='jit', packages=['jit'])\n",
        "jit/__init__.py": "",
        "jit/compiler.py": "import subprocess\n"
                           "def build(path, nvcc):\n"
                           "    so_path = f'{path}/kernel.so'\n"
                           "    command = [nvcc, 'kernel.cu', '-shared', '-o', so_path]\n"
                           "    subprocess.check_call(command)\n",
        "jit/runtime.py": "FILES = ['kernel.cu', 'kernel.so']\n"
                          "import ctypes\nlib = ctypes.CDLL(f'{here}/_ops.so')\n"})
    found = {(f.path, f.line): f.severity.value
             for f in scan_tree(root, make_target("windows", "sm120"),
                                ScanOptions(static=True)).findings if f.rule == "FB182"}
    assert found == {("jit/compiler.py", 3): "note", ("jit/runtime.py", 1): "note",
                     ("jit/runtime.py", 3): "error"}
