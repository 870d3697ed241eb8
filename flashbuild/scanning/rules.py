"""The rules `flashbuild scan` applies: id, category, one line, and why it matters.

Ids are stable (SARIF consumers key on them). `help` cites the fact behind each rule with
what a user can open: a section of this repository's docs (`docs/scan.md#...`, "The facts
behind the rules"), or an upstream issue; `help_uri` is the upstream page that states the fact
(NVIDIA, Microsoft, CMake, Python, torch), SARIF's `helpUri`. tests/unit/test_message_sources.py
checks that each cited section exists and names that page.
"""

from __future__ import annotations

from flashbuild.scanning.findings import Category, Rule
from flashbuild.toolchain_facts import (
    MSVC_HOST_FLAGS,
    USE_CUDA_FROM_TORCH,
    ZC_PREPROCESSOR_FROM_CUDA,
)

_RULES = [
    Rule(id="FB010", name="source-encoding", category=Category.SOURCE_TEXT,
         short="source read as Latin-1 or UTF-16, not UTF-8",
         help="A NUL-free file that is not UTF-8 is read as Latin-1 byte for byte, and UTF-16 "
         "by its byte-order mark, as `flashbuild patch` reads and writes it "
         "(docs/reliability.md#patch-encodings); every check runs on it. nvcc and cl "
         "read such a file in their own default code page, so non-ASCII text in it may differ "
         "between compilers."),
    Rule(id="FB101", name="dlfcn-dynamic-loading", category=Category.DYNAMIC_LOADING,
         short="dlopen/dlsym through <dlfcn.h>",
         help="<dlfcn.h> does not exist on Windows (docs/scan.md#what-msvc-lacks). The "
         "`dynamic-loading` transform (mode `portable`) maps dlopen/dlsym/dlerror/dlclose to "
         "LoadLibraryExW/GetProcAddress/FormatMessage.",
         help_uri="https://learn.microsoft.com/en-us/windows/win32/api/libloaderapi/nf-libloaderapi-loadlibraryexw"),
    Rule(id="FB102", name="plugin-export", category=Category.DYNAMIC_LOADING,
         short="extern \"C\" entry point of a plugin without dllexport",
         help="`extern \"C\"` alone exports nothing from a DLL "
         "(docs/scan.md#exporting-from-a-dll); the plugin entry points need "
         "__declspec(dllexport). The `dynamic-loading` transform adds it.",
         help_uri="https://learn.microsoft.com/en-us/cpp/build/exporting-from-a-dll-using-declspec-dllexport"),
    Rule(id="FB110", name="posix-header", category=Category.POSIX,
         short="POSIX-only header",
         help="unistd.h, sys/time.h, sys/mman.h, dirent.h, pthread.h and friends do not exist "
         "with MSVC (docs/scan.md#what-msvc-lacks)."),
    Rule(id="FB111", name="posix-type", category=Category.POSIX,
         short="POSIX-only type (ssize_t)",
         help="MSVC has no ssize_t; use ptrdiff_t or int64_t."),
    Rule(id="FB112", name="int128", category=Category.GCC,
         short="__int128",
         help="MSVC has no __int128 (docs/scan.md#what-msvc-lacks); host "
         "code that uses it does not compile on Windows."),
    Rule(id="FB113", name="math-constants", category=Category.POSIX,
         short="M_PI and friends without _USE_MATH_DEFINES before <math.h>",
         help="M_PI, M_SQRT2, M_LOG2E and the other M_ constants are POSIX, not ISO C++; "
         "MSVC's <math.h> defines them only when _USE_MATH_DEFINES is defined as it is "
         "included, else cl stops with C2065 (docs/scan.md#what-msvc-lacks). In a .cu file "
         "nvcc's cuda_runtime.h includes <math.h> and <cmath> before the file's first line: "
         "define it for the build.",
         help_uri="https://learn.microsoft.com/en-us/cpp/c-runtime-library/math-constants"),
    Rule(id="FB114", name="designated-initializer", category=Category.MSVC_CXX,
         short="designated initialiser compiled as C++17 or older",
         help="`{.x = 1}` is C++20; GCC accepts it in older modes as an extension, MSVC stops "
         "with C7555 below /std:c++20 (docs/scan.md#c-that-msvc-reads-otherwise). Reported "
         "only when the build's flags name the standard."),
    Rule(id="FB115", name="constexpr-lambda-capture", category=Category.MSVC_CXX,
         short="constexpr local used as a template argument inside a capturing lambda",
         help="MSVC treats a constexpr local that a lambda captures as not constant inside "
         "it, so `f<N>()` in the lambda stops with C2975 (docs/scan.md#c-that-msvc-reads-"
         "otherwise); `static constexpr` or a constant declared in the lambda compiles "
         "everywhere."),
    Rule(id="FB116", name="filesystem-path-c-str", category=Category.MSVC_CXX,
         short="std::filesystem::path::c_str() where a char string may be needed",
         help="On Windows a path holds wchar_t: c_str() and native() give const wchar_t*, "
         "which no const char* parameter takes (docs/scan.md#c-that-msvc-reads-otherwise); "
         "path.string().c_str() is the portable char string."),
    Rule(id="FB119", name="cub-debug-synchronous", category=Category.LIBRARY_API,
         short="a CUB device-wide call passes `debug_synchronous`, which CCCL 3 removed",
         help="CUB deprecated the trailing `debug_synchronous` argument of its `cub::Device*` "
         "algorithms in CCCL 2.0 and CCCL 3.0 (CUDA 13) removed it: nvcc stops with \"no "
         "instance of overloaded function\". The call without it compiles with every CUDA "
         "(docs/scan.md#library-apis-newer-releases-changed).",
         help_uri="https://nvidia.github.io/cccl/cccl/3.0_migration_guide.html"),
    Rule(id="FB123", name="condition-without-parentheses", category=Category.LIBRARY_API,
         short="an if/while condition that is one macro call, without parentheses of its own",
         help="`if PyTuple_Check(o) {` compiles only while the name is a macro whose expansion "
         "is parenthesised; Python 3.10 made PyType_HasFeature a function, so with 3.11's "
         "headers it is a plain call and g++ stops with \"expected '(' before\" "
         "(docs/scan.md#library-apis-newer-releases-changed). `if (PyTuple_Check(o))` "
         "compiles with every release."),
    Rule(id="FB124", name="dispatch-deprecated-type", category=Category.LIBRARY_API,
         short="a torch AT_DISPATCH macro is given `tensor.type()` instead of a ScalarType",
         help="`Tensor::type()` returns DeprecatedTypeProperties, which current torch no "
         "longer converts to the ScalarType AT_DISPATCH_* takes: nvcc stops with \"no "
         "suitable conversion function\" (docs/scan.md#library-apis-newer-releases-changed). "
         "`tensor.scalar_type()` compiles with every torch since 1.0."),
    Rule(id="FB125", name="torch-thc-removed", category=Category.LIBRARY_API,
         short="uses THC, torch's CUDA library that torch 1.11 removed",
         help="`#include <THC/THC.h>`, `THCState_getCurrentStream(state)`, `THCudaCheck` and "
         "the rest of THC went away in torch 1.11: such a tree stops at \"THC/THC.h: No such "
         "file or directory\". The drafted edits use the ATen/c10 successors "
         "(ATen/cuda/CUDAContext.h, at::cuda::getCurrentCUDAStream(), C10_CUDA_CHECK, "
         "at::ceil_div, CUDACachingAllocator::raw_alloc/raw_delete); a line with another THC "
         "name is left for a person."),
    Rule(id="FB126", name="torch-at-check-removed", category=Category.LIBRARY_API,
         short="calls AT_CHECK, which torch 1.5 removed",
         help="AT_CHECK was deprecated for TORCH_CHECK, which takes the same arguments, and "
         "is undefined since torch 1.5 (pytorch/pytorch#36581): \"'AT_CHECK' was not "
         "declared in this scope\". The drafted edit calls TORCH_CHECK."),
    Rule(id="FB117", name="missing-cstdint", category=Category.INCLUDES,
         short="fixed-width integer types in a unit that includes no <cstdint>",
         help="libstdc++ 13 stopped including <cstdint> from <string> and other headers: a "
         "unit that names uint32_t or std::int64_t and includes only such headers stops with "
         "\"was not declared\" under GCC 13 and later "
         "(docs/scan.md#what-gcc-13-no-longer-includes). Static reading; GCC 12 and MSVC "
         "still compile it.",
         help_uri="https://gcc.gnu.org/gcc-13/porting_to.html"),
    Rule(id="FB118", name="library-header-not-found", category=Category.INCLUDES,
         short="a library header no folder of the build holds (cudnn.h, nccl.h, mpi.h)",
         help="cuDNN, NCCL, MPI, cuSPARSELt, cuTENSOR and NVSHMEM are not part of the CUDA "
         "toolkit nor of torch's headers; a unit that includes one needs the library's "
         "include folder on its path (docs/scan.md#libraries-outside-the-toolkit)."),
    Rule(id="FB120", name="gcc-attribute", category=Category.GCC,
         short="GCC __attribute__((...)) in host-compiled code",
         help="cl.exe rejects the __attribute__ syntax itself, visibility included; put it "
         "behind a macro that expands to __declspec(...) / nothing on MSVC."),
    Rule(id="FB121", name="gcc-builtin", category=Category.GCC,
         short="GCC __builtin_* in host-compiled code",
         help="MSVC has none of GCC's __builtin_* functions in host code (nvcc handles them in "
         "__device__/__global__ bodies, which cl.exe never sees)."),
    Rule(id="FB122", name="gcc-inline-asm", category=Category.GCC,
         short="GNU inline assembly in host-compiled code",
         help="cl.exe has no inline assembler for x64 (`__asm` is x86-only, C4235) and does "
         "not parse GNU `asm(...)`/`__asm__` (docs/scan.md#what-msvc-lacks); `asm()` in "
         "__device__/__global__ code is PTX for nvcc and fine.",
         help_uri="https://learn.microsoft.com/en-us/cpp/assembler/inline/inline-assembler"),
    Rule(id="FB130", name="windows-h-macro", category=Category.WINDOWS_MACROS,
         short="identifier that windows.h turns into a macro",
         help="windows.h defines `small` (rpcndr.h) and min/max unless NOMINMAX is defined "
         "(docs/scan.md#what-msvc-lacks); a TU that includes it, directly or through the "
         "dynamic-loading compat layer, breaks on these names."),
    Rule(id="FB140", name="kernel-instantiation", category=Category.INSTANTIATIONS,
         short="explicit instantiation of a __global__ template",
         help="MSVC's host pass rejects a `template __global__ ...;` line whose parameter "
         "list leaves out (or adds) a `__restrict__` or a pointer's own `const` of the "
         "template's: the Microsoft ABI mangles them as written. One that repeats them is "
         "accepted and not reported (docs/scan.md#explicit-instantiations-and-cuda-13). The "
         "`explicit-instantiations` transform guards the others.",
         help_uri="https://docs.nvidia.com/cuda/cuda-compiler-driver-nvcc/"),
    Rule(id="FB141", name="host-instantiation", category=Category.INSTANTIATIONS,
         short="explicit instantiation of a host template no other file uses",
         help="Guarded by the `explicit-instantiations` transform for MSVC; nothing else in the "
         "tree references it."),
    Rule(id="FB142", name="host-instantiation-kept", category=Category.INSTANTIATIONS,
         short="explicit instantiation another translation unit needs (kept)",
         help="Removing a host template instantiation that another file calls breaks linking "
         "(docs/scan.md#explicit-instantiations-and-cuda-13); the transform keeps it and says so.",
         help_uri="https://docs.nvidia.com/cuda/cuda-compiler-driver-nvcc/"),
    Rule(id="FB150", name="arch-allowlist-error", category=Category.ARCH_GATING,
         short="__CUDA_ARCH__ allow-list ends in #error for the target",
         help="The preprocessor reaches an #error when __CUDA_ARCH__ is the target's value: the "
         "allow-list does not list it."),
    Rule(id="FB151", name="arch-equality-test", category=Category.ARCH_GATING,
         short="__CUDA_ARCH__ equality test leaves the target out",
         help="`__CUDA_ARCH__ == N` names one arch of the target's generation but not the "
         "target, so the target silently takes another path. The `macro-edit` transform "
         "extends the test."),
    Rule(id="FB152", name="cmake-arch-strequal", category=Category.ARCH_GATING,
         short="CMake arch gate by exact string comparison",
         help="`STREQUAL \"120\"` is false for `120a` or `120f`, and for a sibling arch: the "
         "feature silently turns off (docs/scan.md#cmake-arch-strings).",
         help_uri="https://cmake.org/cmake/help/latest/prop_tgt/CUDA_ARCHITECTURES.html"),
    Rule(id="FB153", name="runtime-major-check", category=Category.ARCH_GATING,
         short="runtime compute-capability equality that sends the target down an old path",
         help="`major == 9` style checks with no branch accepting the target's major send a new "
         "GPU to a fallback (or an error) at run time."),
    Rule(id="FB154", name="placeholder-kernel", category=Category.ARCH_GATING,
         short="kernel whose body for the target is only a trap (or nothing)",
         help="A `__global__` function (or the one device function its body calls) whose "
         "`__CUDA_ARCH__` gate drops the work for the target and keeps only `__trap()`, "
         "`__brkpt()`, `assert(0)`, `printf` or CUTE_INVALID_CONTROL_PATH compiles, links and "
         "imports, and traps at its first launch (FlashMLA's sm90/sm100 kernels on sm_120). "
         "Build for the arch the kernel is written for, or add an implementation for the "
         "target; widening the gate compiles code that uses what the target lacks."),
    Rule(id="FB160", name="arch-instruction", category=Category.ARCH_INSTRUCTIONS,
         short="instruction the target lacks, compiled for the target",
         help="wgmma is sm_90a only, tcgen05 sm_100a-class only, kind::f8f6f4 needs an `a` target; "
         "sm_120 has no wgmma and no tcgen05 (docs/scan.md#instructions-per-target). Exclude the "
         "source for the target (`exclude-sources`) or gate it.",
         help_uri="https://docs.nvidia.com/cuda/parallel-thread-execution/"),
    Rule(id="FB170", name="smem-over-budget", category=Category.SHARED_MEMORY,
         short="constant shared-memory budget above the target's per-block limit",
         help="The target allows this much dynamic shared memory per block at most (sm_120 99 KB, "
         "sm_90 227 KB: docs/scan.md#shared-memory-per-block); a launch asking for more fails.",
         help_uri="https://docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/compute-capabilities.html"),
    Rule(id="FB180", name="ctypes-hardcoded-library", category=Category.PYTHON_PACKAGING,
         short="ctypes loads a hard-coded POSIX library name",
         help="`libcudart.so` does not exist on Windows (cudart64_13.dll) nor in the PyPI CUDA "
         "wheel layout, which only has libcudart.so.13 "
         "(docs/scan.md#loading-the-cuda-runtime)."),
    Rule(id="FB181", name="no-dll-directory", category=Category.PYTHON_PACKAGING,
         short="package imports an extension module without registering DLL folders",
         help="Python ≥ 3.8 ignores PATH when loading a .pyd "
         "(docs/scan.md#loading-the-cuda-runtime); the package must call os.add_dll_directory; "
         "the install step of `flashbuild build` adds a loader shim that does.",
         help_uri="https://docs.python.org/3/library/os.html#os.add_dll_directory"),
    Rule(id="FB182", name="hardcoded-so-suffix", category=Category.PYTHON_PACKAGING,
         short="hard-coded `.so` suffix",
         help="Extension modules are .pyd and libraries .dll on Windows; use "
         "importlib.machinery.EXTENSION_SUFFIXES or sysconfig's EXT_SUFFIX."),
    Rule(id="FB190", name="cmake-no-msvc-flags", category=Category.CMAKE,
         short="no if(MSVC) block with the flags MSVC builds need",
         help=f"MSVC needs /Zc:preprocessor (CCCL in CUDA >= {ZC_PREPROCESSOR_FROM_CUDA}), "
         f"{' '.join(MSVC_HOST_FLAGS)} (CUTLASS) (docs/scan.md#msvc-flags).",
         help_uri="https://learn.microsoft.com/en-us/cpp/build/reference/zc-preprocessor"),
    Rule(id="FB191", name="cmake-dll-output", category=Category.CMAKE,
         short="shared library output set for .so only; the Windows DLL lands elsewhere",
         help="On DLL platforms the DLL of a SHARED library is a RUNTIME output; "
         "LIBRARY_OUTPUT_DIRECTORY alone leaves it in the build folder, away from the package "
         "(CMake docs: Output Artifacts; docs/scan.md#where-a-dll-lands-cmake).",
         help_uri="https://cmake.org/cmake/help/latest/manual/cmake-buildsystem.7.html#output-artifacts"),
    Rule(id="FB192", name="cmake-hardcoded-dl", category=Category.CMAKE,
         short="links `dl` by name",
         help="There is no libdl on Windows; link ${CMAKE_DL_LIBS} (empty there)."),
    Rule(id="FB193", name="cmake-gcc-warning-flag-to-cl", category=Category.CMAKE,
         short="-Xcompiler passes a GCC -W flag that cl.exe reads as a warning level",
         help="nvcc hands `-Xcompiler -Wno-foo` to the host compiler as is; cl.exe reads "
         "`-W` as a warning level and stops with D8021 \"invalid numeric argument\" (unlike "
         "`-O3`, which it only warns about). Give the flag only to GCC/Clang, e.g. under "
         "`if(NOT MSVC)`."),
    Rule(id="FB195", name="cmake-standard-below-torch", category=Category.CMAKE,
         short="the CMakeLists pins a C++ standard older than torch's headers need",
         help="torch 2.14's headers `#error` below C++20 outside MSVC (torch/all.h; 2.13's ask "
         "for C++17): a project that finds torch and sets CMAKE_CXX_STANDARD (or "
         "CMAKE_CUDA_STANDARD) to 17 compiles none of its units that include them. The "
         "drafted step sets 20 for torch 2.14 and later only."),
    Rule(id="FB194", name="cmake-arch-from-build-machine", category=Category.ARCH_SELECTION,
         short="the arch variable comes from the build machine's GPU, with a fixed fallback",
         help="An arch read from `nvidia-smi` at configure time builds for whatever GPU the "
         "build box has, and for the fallback when it has none (a CI runner, a container "
         "without the driver): the module then has no code for the GPU it runs on. Pass the "
         "variable with -D (a recipe's cmake defines)."),
    Rule(id="FB196", name="cmake-arch-define-with-suffix", category=Category.ARCH_SELECTION,
         short="the arch variable reaches C/C++ as a define that a suffixed arch makes no "
         "number",
         help="A CMakeLists that builds `-arch sm_${V}` and also passes `-DNAME=${V}` to the "
         "compilers gives C/C++ `NAME=90a` for sm_90a, and `#if NAME < 60` then stops (g++: "
         "\"user-defined literal in preprocessor expression\"). The drafted step strips the "
         "suffix for the define only, so the arch flag still asks for the arch-specific "
         "SASS."),
]

_RULES += [
    Rule(id="FB200", name="setup-no-zc-preprocessor", category=Category.SETUP_FLAGS,
         short="nvcc never gets -Xcompiler /Zc:preprocessor on Windows",
         help=f"The CCCL of CUDA {ZC_PREPROCESSOR_FROM_CUDA} and later stops with #error C1189 "
         "under MSVC's traditional preprocessor; cl needs /Zc:preprocessor, passed through nvcc "
         "(docs/scan.md#msvc-flags; flash-attention #2395, pytorch #197574). Older CUDA passes.",
         help_uri="https://github.com/Dao-AILab/flash-attention/issues/2395"),
    Rule(id="FB201", name="setup-msvc-flags-need-sdk", category=Category.SETUP_FLAGS,
         short="MSVC flags added only when DISTUTILS_USE_SDK=1",
         help="setup.py adds its MSVC flags only when DISTUTILS_USE_SDK=1, which a plain "
         "`pip install` from a developer prompt does not set: the flags silently go missing."),
    Rule(id="FB202", name="setup-gcc-only-cxx-flags", category=Category.SETUP_FLAGS,
         short="GCC-only cxx flags reach cl.exe",
         help="cl.exe ignores options it does not know with warning D9002 (-O3, -fopenmp, "
         "-std=c++17); torch appends /std:c++17 itself. A warning, not a break "
         "(docs/scan.md#msvc-flags).",
         help_uri="https://learn.microsoft.com/en-us/cpp/error-messages/tool-errors/command-line-warning-d9002"),
    Rule(id="FB210", name="torch-extension-h-without-use-cuda", category=Category.TORCH_HEADERS,
         short=".cu includes torch/extension.h and nvcc gets no -DUSE_CUDA",
         help=f"With torch >= {USE_CUDA_FROM_TORCH} on Windows, nvcc + cl stop in "
         "torch/csrc/dynamo/compiled_autograd.h with C2872 \"'std': ambiguous symbol\": torch's "
         "workaround is guarded by defined(USE_CUDA) (SageAttention #101/#228/#281, pytorch "
         "#148317; docs/scan.md#msvc-flags).",
         help_uri="https://github.com/pytorch/pytorch/issues/148317"),
    Rule(id="FB220", name="setup-hardcoded-gencode", category=Category.ARCH_SELECTION,
         short="hard-coded -gencode list: TORCH_CUDA_ARCH_LIST is ignored",
         help="torch's cpp_extension adds no arch flags when any nvcc flag names an arch, so "
         "TORCH_CUDA_ARCH_LIST cannot choose the target (docs/scan.md#torchs-arch-flags); a list "
         "without the target gives 'no kernel image is available' on that GPU.",
         help_uri="https://github.com/pytorch/pytorch/blob/main/torch/utils/cpp_extension.py"),
    Rule(id="FB221", name="setup-sources-of-several-archs", category=Category.ARCH_SELECTION,
         short="one extension compiles sources written for several archs, for every listed arch",
         help="With a hard-coded gencode list every source of the extension is compiled for "
         "every arch in it: sources written for sm_90 are also compiled for sm_100 (to stubs "
         "behind their `__CUDA_ARCH__` gates) and the other way round, and a switch that drops "
         "one arch's gencode leaves its sources in the build. Costs build time, not a break."),
    Rule(id="FB222", name="setup-host-cccl-include", category=Category.SETUP_FLAGS,
         short="a host-compiled source reaches CCCL, whose CUDA 13 folder torch does not add",
         help="CUDA 13 keeps CCCL (cuda/std, cub, thrust) in <CUDA_HOME>/include/cccl; nvcc "
         "adds that folder itself, torch's cpp_extension gives the host compiler only "
         "<CUDA_HOME>/include, so a .cpp that includes CUTLASS or CCCL stops with \"No such "
         "file or directory\". Add the folder to include_dirs (flashbuild's build does)."),
    Rule(id="FB230", name="setup-downloads", category=Category.SETUP_BUILD,
         short="setup.py downloads or clones during the build",
         help="A download during the build fails offline and on locked-down CI runners, and "
         "makes the build depend on what the server holds that day."),
    Rule(id="FB231", name="setup-build-isolation-torch", category=Category.SETUP_BUILD,
         short="an isolated build environment gets the wrong torch",
         help="pip's isolated build installs torch from PyPI, which is CPU-only on Windows, or "
         "no torch at all when the build requires omit it (a tree with no pyproject.toml, "
         "or none with [build-system], gets setuptools alone: pip 25.3 and later build every "
         "project that way); a torch extension must build with --no-build-isolation against "
         "the CUDA torch already installed."),
    Rule(id="FB233", name="setup-version-timestamp", category=Category.SETUP_BUILD,
         short="the version falls back to a timestamp taken when setup.py runs",
         help="pip runs setup.py twice (metadata, then the wheel); a version with the time in "
         "it differs between the two and pip rejects the wheel (\"Built wheel is invalid: "
         "expected …, got …\"). It happens wherever the version's first source (git) fails, "
         "e.g. in a copy without .git."),
    Rule(id="FB232", name="setup-long-object-path", category=Category.SETUP_BUILD,
         short="object file path will pass 260 characters on Windows",
         help="setuptools writes objects under build/temp.<plat>-<py>/Release/<source path>; "
         "past MAX_PATH (260) cl, link and nvcc fail, LongPathsEnabled or not (they are not "
         "long-path aware)."),
]

RULES: dict[str, Rule] = {r.id: r for r in _RULES}
