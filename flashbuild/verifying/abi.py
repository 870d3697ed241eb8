"""ABI checks of one binary: manylinux symbol versions, the torch it was built against,
abi3 where claimed, and a Windows `.pyd`'s DLL imports.

The policy numbers are data, not code: the highest symbol version each libc/libstdc++
interface may need, taken from the auditwheel policy file
(auditwheel/policy/manylinux-policy.json, pypa/auditwheel) and PEP 600 (a
`manylinux_2_X` tag means "glibc 2.X or newer"; manylinux2014 is its alias
manylinux_2_17, PEP 599). A binary that needs a newer version than its policy allows
fails to import on the oldest systems the tag promises to support.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import pefile
from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection
from elftools.elf.hash import ELFHashSection, GNUHashSection
from elftools.elf.sections import SymbolTableSection

from flashbuild.errors import FlashbuildError, UsageError, VerifyError

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from pathlib import Path

    from flashbuild.runner import Runner

# The symbol-version families a manylinux policy bounds (auditwheel's "symbol_versions").
_FAMILIES = ("GLIBC", "GLIBCXX", "CXXABI")
_VERSION = re.compile(r"^(GLIBC|GLIBCXX|CXXABI)_(\d+(?:\.\d+)*)$")


@dataclass(frozen=True)
class Policy:
    """One manylinux policy: its name and the highest version per family."""

    name: str
    limits: dict[str, tuple[int, ...]]


def _v(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


# From auditwheel's manylinux-policy.json (x86_64 entries): the newest GLIBC_, GLIBCXX_
# and CXXABI_ version of the reference distribution of each policy (CentOS 7 for
# _2_17, AlmaLinux 8 for _2_28, AlmaLinux 9 for _2_34). _2_39 is glibc 2.39's, the glibc of
# Ubuntu 24.04 (ubuntu-24.04 runners, the project's GPU machines): the newest policy a wheel
# linked there can claim (`__isoc23_strtol@GLIBC_2.38` and the like put it past _2_34).
POLICIES: dict[str, Policy] = {
    policy.name: policy for policy in (
        Policy("manylinux_2_17", {"GLIBC": _v("2.17"), "GLIBCXX": _v("3.4.19"),
                                  "CXXABI": _v("1.3.7")}),
        Policy("manylinux_2_28", {"GLIBC": _v("2.28"), "GLIBCXX": _v("3.4.24"),
                                  "CXXABI": _v("1.3.11")}),
        Policy("manylinux_2_34", {"GLIBC": _v("2.34"), "GLIBCXX": _v("3.4.29"),
                                  "CXXABI": _v("1.3.13")}),
        Policy("manylinux_2_39", {"GLIBC": _v("2.39"), "GLIBCXX": _v("3.4.33"),
                                  "CXXABI": _v("1.3.15")}),
    )
}
ALIASES = {"manylinux2014": "manylinux_2_17"}


#: The libraries every manylinux policy from manylinux_2_17 on lets a wheel need without
#: bundling them (auditwheel 6.8.2's manylinux-policy.json, "lib_whitelist"), and the loader.
SYSTEM_LIBRARIES = frozenset({
    "libatomic.so.1", "libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libanl.so.1",
    "libdl.so.2", "librt.so.1", "libc.so.6", "libnsl.so.1", "libutil.so.1", "libpthread.so.0",
    "libX11.so.6", "libXext.so.6", "libXrender.so.1", "libICE.so.6", "libSM.so.6", "libGL.so.1",
    "libgobject-2.0.so.0", "libgthread-2.0.so.0", "libglib-2.0.so.0", "libresolv.so.2",
    "libexpat.so.1", "libz.so.1", "ld-linux-x86-64.so.2",
})
#: Allowed from manylinux_2_28 on (the same file): glibc's vector math library.
SYSTEM_LIBRARIES_2_28 = frozenset({"libmvec.so.1"})


def system_libraries(policy: Policy) -> frozenset[str]:
    """The libraries a wheel under `policy` may need from the system."""
    if policy.limits["GLIBC"] >= _v("2.28"):
        return SYSTEM_LIBRARIES | SYSTEM_LIBRARIES_2_28
    return SYSTEM_LIBRARIES


#: Libraries a wheel of a CUDA extension must never carry (fnmatch patterns on the soname):
#: torch's own (`libc10*.so`, `libtorch*.so`, `libshm.so`: the torch the user installed
#: provides them, and a second copy breaks its c10 registries), the driver (`libcuda.so.1`,
#: `libnvidia-*`: it comes with the GPU driver and must match the kernel module), and the CUDA
#: runtime and libraries (`libcudart`, `libcublas*`, `libnvrtc*`, `libnvJitLink*`, ...: torch's
#: Linux wheel depends on the nvidia-* wheels that hold them, and a bundled copy would shadow
#: the one torch loaded).
#: `libcu*` covers libcuda, libcudart, libcublas, libcusparse, libcusolver, libcurand, libcufft,
#: libcupti and libcudnn; `libnv*` libnvrtc, libnvJitLink, libnvToolsExt and libnvidia-*.
NEVER_BUNDLED = ("libc10*.so*", "libtorch*.so*", "libshm.so*", "libcu*.so*", "libnv*.so*",
                 "libnccl*.so*")


def policy_named(name: str) -> Policy:
    """The policy for a `--policy` value or a wheel platform tag
    (`manylinux_2_28_x86_64` names manylinux_2_28)."""
    key = re.sub(r"_(x86_64|aarch64|ppc64le|s390x|i686)$", "", name.strip())
    key = ALIASES.get(key, key)
    if key not in POLICIES:
        raise UsageError(f"unknown manylinux policy {name!r}",
                       evidence=f"known: {', '.join(sorted([*POLICIES, *ALIASES]))}",
                       fix="pass one of the known policies to --policy")
    return POLICIES[key]


@dataclass(frozen=True)
class Needed:
    """One symbol version a binary needs (`GLIBC_2.38` from libc.so.6)."""

    library: str
    family: str
    version: tuple[int, ...]

    @property
    def label(self) -> str:
        return f"{self.family}_{'.'.join(map(str, self.version))}"


def needed_versions(path: Path) -> list[Needed]:
    """The GLIBC_/GLIBCXX_/CXXABI_ versions in the binary's version-needs section."""
    try:
        with path.open("rb") as stream:
            elf = ELFFile(stream)
            found: list[Needed] = []
            for section in elf.iter_sections():
                if not isinstance(section, GNUVerNeedSection):
                    continue
                for verneed, auxes in section.iter_versions():
                    for aux in auxes:
                        match = _VERSION.match(aux.name)
                        if match:
                            found.append(Needed(str(verneed.name), match[1], _v(match[2])))
            return found
    except (ELFError, OSError, ValueError) as exc:
        raise VerifyError(f"cannot read the symbol versions of {path.name}",
                       evidence=str(exc),
                       fix="check that the file is a complete ELF shared object") from exc


def policy_for_glibc(glibc: str) -> Policy | None:
    """The newest known policy a machine with this glibc (`2.36`) satisfies: what a wheel
    built there can at best claim (PEP 600: `manylinux_2_X` needs glibc 2.X or newer)."""
    fits = [p for p in POLICIES.values() if p.limits["GLIBC"] <= _v(glibc)]
    return max(fits, key=lambda p: p.limits["GLIBC"]) if fits else None


def needed_libraries(path: Path) -> list[str]:
    """The sonames a binary's dynamic section names (`DT_NEEDED`), in order."""
    try:
        with path.open("rb") as stream:
            section = ELFFile(stream).get_section_by_name(".dynamic")
            if not isinstance(section, DynamicSection):
                return []
            # pyelftools sets `.needed` on DT_NEEDED tags only (not in its stubs' type).
            return [str(getattr(tag, "needed", "")) for tag in section.iter_tags("DT_NEEDED")]
    except (ELFError, OSError, ValueError) as exc:
        raise VerifyError(f"cannot read the libraries {path.name} needs",
                          evidence=str(exc),
                          fix="check that the file is a complete ELF shared object") from exc


def violations(path: Path, policy: Policy) -> list[str]:
    """One line per needed version newer than the policy allows, naming the symbol version
    and the policy's limit."""
    lines = []
    for need in needed_versions(path):
        limit = policy.limits.get(need.family)
        if limit is not None and need.version > limit:
            lines.append(f"{path.name} needs {need.label} ({need.library}); "
                         f"{policy.name} allows at most "
                         f"{need.family}_{'.'.join(map(str, limit))}")
    return lines


def platform_tag_warning(tag: str) -> str | None:
    """A warning for a wheel tag PyPI refuses (`linux_x86_64`), else None."""
    if tag.startswith("linux_"):
        return (f"platform tag {tag}: PyPI refuses linux_* wheels; build in a manylinux "
                "image and tag the wheel with its policy")
    return None


# --- the torch a binary was built against ----------------------------------------------------

Severity = Literal["ok", "note", "error"]


@dataclass(frozen=True)
class Finding:
    """One ABI verdict: its severity, a one-line summary and the fix (empty when none)."""

    severity: Severity
    summary: str
    evidence: str = ""
    fix: str = ""


_RELEASE = re.compile(r"^(\d+)\.(\d+)")


def torch_version_finding(built: str, installed: str) -> Finding:
    """The torch recorded at build time against the one installed: another major.minor is an
    error (c10/at symbols change between minor releases: `undefined symbol: _ZN3c10...`);
    a difference only in the local suffix (`+cu130` vs `+cpu`) or the patch release is a note."""
    b, i = _RELEASE.match(built), _RELEASE.match(installed)
    if b is None or i is None or (b[1], b[2]) != (i[1], i[2]):
        return Finding("error", f"built against torch {built}, torch {installed} is installed",
                       fix=f"rebuild against torch {installed} (`flashbuild build`), or "
                       f"install torch=={built.split('+', maxsplit=1)[0]}")
    if built != installed:
        return Finding("note", f"built against torch {built}, torch {installed} is installed "
                       "(same release, another build)")
    return Finding("ok", f"built against torch {built}, the installed one")


#: Libraries of libtorch whose exports a module's c10::/at:: imports resolve against; the CUDA
#: one is absent from CPU wheels.
TORCH_LIBS = ("libc10.so", "libtorch_cpu.so", "libtorch_python.so", "libtorch_cuda.so",
              "libc10_cuda.so", "libtorch.so")
#: Itanium mangling of the two namespaces: `_ZN3c10` (c10::) and `_ZN2at` (at::), also inside
#: a nested name with qualifiers (`_ZNK3c10`, `_ZNK2at`).
_TORCH_SYMBOL = re.compile(r"^_ZN[KVR]*(3c10|2at)")


def _dynamic_symbols(path: Path) -> tuple[frozenset[str], frozenset[str]]:
    """(defined, undefined) names of the ELF's .dynsym only: bounded work, no full symtab."""
    defined: set[str] = set()
    undefined: set[str] = set()
    with path.open("rb") as stream:
        section = ELFFile(stream).get_section_by_name(".dynsym")
        if isinstance(section, SymbolTableSection):
            for sym in section.iter_symbols():
                if not sym.name:
                    continue
                if sym["st_shndx"] == "SHN_UNDEF":
                    # A weak reference may stay unresolved: the loader sets it to 0.
                    if sym["st_info"]["bind"] == "STB_WEAK":
                        continue
                    undefined.add(sym.name)
                else:
                    defined.add(sym.name)
    return frozenset(defined), frozenset(undefined)


#: Per library (path, mtime): which names it was asked about and whether it defines them. A
#: wheel's binaries all look up against one libtorch; each name is looked up once.
_LOOKED_UP: dict[tuple[Path, int], dict[str, bool]] = {}


def _defines(lib: Path, names: Iterable[str]) -> set[str]:
    """The names `lib` exports, found through its .gnu.hash / .hash table (a few lookups,
    not a walk over libtorch_cpu's hundred thousand symbols: that takes seconds)."""
    known = _LOOKED_UP.setdefault((lib, lib.stat().st_mtime_ns), {})
    todo = [n for n in names if n not in known]
    if todo:
        with lib.open("rb") as stream:
            elf = ELFFile(stream)
            table = elf.get_section_by_name(".gnu.hash") or elf.get_section_by_name(".hash")
            if isinstance(table, (GNUHashSection, ELFHashSection)):
                for name in todo:
                    sym = table.get_symbol(name)
                    known[name] = sym is not None and sym["st_shndx"] != "SHN_UNDEF"
            else:
                defined, _ = _dynamic_symbols(lib)
                known.update((name, name in defined) for name in todo)
    return {n for n in names if known[n]}


def torch_lib_files(lib_dir: Path) -> tuple[Path, ...]:
    """The installed libtorch libraries present (none: the check is skipped, not failed)."""
    return tuple(lib_dir / name for name in TORCH_LIBS if (lib_dir / name).is_file())


def private_cxx_runtime(path: Path) -> str:
    """Evidence that a binary linked against torch carries its own copy of the C++ runtime
    (libstdc++ linked statically: it defines `__cxa_throw` and needs no libstdc++.so); ""
    otherwise. torch's `TORCH_CHECK` and pybind11 throw C++ exceptions across that boundary,
    and with two runtimes in one process the throw crashes it: marlin built with the H200
    machine's CXX (a g++ wrapper whose `-B/opt/gcc/bin/` links libstdc++ statically) died
    with SIGSEGV in its own test_errors, and built with /usr/bin/g++ raised as it should."""
    try:
        needed = needed_libraries(path)
        if not any(name in TORCH_LIBS for name in needed) or \
                any(name.startswith("libstdc++.so") for name in needed):
            return ""
        defined, _undefined = _dynamic_symbols(path)
    except (VerifyError, OSError, ELFError, ValueError):
        return ""
    if "__cxa_throw" not in defined:
        return ""
    torch_libs = ", ".join(n for n in needed if n in TORCH_LIBS)
    return (f"{path.name} needs {torch_libs} but no libstdc++.so, and defines __cxa_throw "
            "itself")


def demangle(names: list[str], runner: Runner) -> list[str]:
    """Human names through c++filt where it is installed; else the mangled names."""
    tool = runner.which("c++filt")
    if tool is None or not names:
        return names
    try:
        done = runner.run([tool], input="\n".join(names), timeout=10, check=False)
    except FlashbuildError:
        return names
    out = done.stdout.splitlines()
    return out if done.ok and len(out) == len(names) else names


def missing_torch_symbols(path: Path, libs: Sequence[Path]) -> list[str]:
    """The c10::/at:: symbols the binary imports that none of `libs` exports (sorted); empty
    when a library cannot be read (no verdict from a partial view)."""
    try:
        wanted = {n for n in _dynamic_symbols(path)[1] if _TORCH_SYMBOL.match(n)}
        for lib in libs:
            if not wanted:
                break
            wanted -= _defines(lib, wanted)
    except (OSError, ELFError, ValueError):
        return []
    return sorted(wanted)


# --- abi3 ------------------------------------------------------------------------------------

#: `_Py`-prefixed names that ARE in the stable ABI (CPython's Misc/stable_abi.toml, mostly
#: `abi_only` entries the limited-API macros expand to: Py_DECREF -> _Py_Dealloc, Py_None ->
#: _Py_NoneStruct, PyArg_ParseTuple with PY_SSIZE_T_CLEAN -> _PyArg_ParseTuple_SizeT).
_STABLE_PRIVATE = frozenset({
    "_Py_Dealloc", "_Py_IncRef", "_Py_DecRef", "_Py_NoneStruct", "_Py_TrueStruct",
    "_Py_FalseStruct", "_Py_NotImplementedStruct", "_Py_EllipsisObject", "_PyObject_New",
    "_PyObject_NewVar", "_PyObject_GC_New", "_PyObject_GC_NewVar", "_PyObject_GC_Resize",
    "_PyArg_ParseTuple_SizeT", "_PyArg_ParseTupleAndKeywords_SizeT", "_PyArg_Parse_SizeT",
    "_PyArg_VaParse_SizeT", "_PyArg_VaParseTupleAndKeywords_SizeT", "_Py_BuildValue_SizeT",
    "_Py_VaBuildValue_SizeT", "_PyObject_CallFunction_SizeT", "_PyObject_CallMethod_SizeT",
    "_PyErr_BadInternalCall", "_Py_CheckRecursiveCall", "_PyWeakref_RefType",
    "_PyWeakref_ProxyType", "_PyWeakref_CallableProxyType", "_Py_SwappedOp",
})
#: Public names outside the limited API that extensions commonly hit (PEP 384: abi3 promises
#: only the stable_abi.toml list). PyUnicode_AsUTF8 joined it only in 3.13, so an abi3 wheel
#: for older Pythons must use PyUnicode_AsUTF8AndSize.
NOT_LIMITED = frozenset({"PyUnicode_AsUTF8", "PyCode_New", "PyCode_NewWithPosOnlyArgs",
                         "PyFrame_FastToLocals", "PyUnicode_AS_DATA"})


def abi3_violations(path: Path) -> list[str]:
    """The CPython symbols a `*.abi3.so` imports from outside the limited API."""
    try:
        undefined = _dynamic_symbols(path)[1]
    except (OSError, ELFError, ValueError):
        return []
    return sorted(n for n in undefined
                  if (n.startswith("_Py") and n not in _STABLE_PRIVATE) or n in NOT_LIMITED)


# --- Windows .pyd imports --------------------------------------------------------------------

#: The VC++ redistributable's runtime: present on most machines, not all.
MSVC_RUNTIME = frozenset({"vcruntime140.dll", "vcruntime140_1.dll", "msvcp140.dll",
                          "msvcp140_1.dll", "msvcp140_2.dll", "concrt140.dll"})
#: Debug runtimes: not redistributable, absent on every machine without Visual Studio.
MSVC_DEBUG = frozenset({"vcruntime140d.dll", "vcruntime140_1d.dll", "msvcp140d.dll",
                        "ucrtbased.dll"})
_VERSIONED_PYTHON = re.compile(r"^python3\d+\.dll$")


#: DLLs every Windows install has (the OS's own; `api-ms-win-*` / `ext-ms-*` API sets are
#: matched by prefix): what the never-bundle check lets a .pyd import without a provider.
WINDOWS_SYSTEM_DLLS = frozenset({
    "kernel32.dll", "kernelbase.dll", "ntdll.dll", "user32.dll", "gdi32.dll", "advapi32.dll",
    "shell32.dll", "shlwapi.dll", "ole32.dll", "oleaut32.dll", "ws2_32.dll", "bcrypt.dll",
    "crypt32.dll", "secur32.dll", "dbghelp.dll", "psapi.dll", "version.dll", "winmm.dll",
    "setupapi.dll", "cfgmgr32.dll", "iphlpapi.dll", "rpcrt4.dll", "comdlg32.dll",
    "msvcrt.dll", "ucrtbase.dll", "dxgi.dll", "d3d11.dll", "d3d12.dll", "opengl32.dll"})
_WINDOWS_API_SET = ("api-ms-win-", "ext-ms-")
#: What a CUDA extension's .pyd imports that its users' torch (torch/lib), the CUDA wheels or
#: the driver provide: never bundled (the same rule as NEVER_BUNDLED on Linux; delvewheel
#: would need each as an --exclude). Wildcards as fnmatch takes them, lower case.
NEVER_BUNDLED_DLLS = ("c10*.dll", "torch*.dll", "shm.dll", "fbgemm.dll", "asmjit.dll",
                      "libiomp5md.dll", "uv.dll", "cudart64_*.dll", "cublas*.dll",
                      "cufft*.dll", "curand64_*.dll", "cusolver*.dll", "cusparse64_*.dll",
                      "nvrtc*.dll", "nvjitlink*.dll", "nvtoolsext*.dll", "cudnn*.dll",
                      "nvcuda.dll", "nccl*.dll")


def windows_provided(dll: str) -> bool:
    """Whether every Windows machine, Python or the Python runtime the wheel needs anyway
    provides `dll` (lower case): the OS, its API sets, python3*.dll, the VC++ runtime."""
    return (dll in WINDOWS_SYSTEM_DLLS or dll.startswith(_WINDOWS_API_SET)
            or dll == "python3.dll" or bool(_VERSIONED_PYTHON.match(dll))
            or dll in MSVC_RUNTIME)


def pe_imports(path: Path) -> list[str]:
    """The DLLs a PE file imports (lower case, in table order), read with pefile."""
    try:
        pe = pefile.PE(str(path), fast_load=True)
        try:
            pe.parse_data_directories(
                directories=[pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_IMPORT"]])
            entries = getattr(pe, "DIRECTORY_ENTRY_IMPORT", [])
            return [e.dll.decode("ascii", "replace").lower() for e in entries]
        finally:
            pe.close()
    except (OSError, pefile.PEFormatError) as exc:
        raise VerifyError(f"cannot read the imports of {path.name}", evidence=str(exc),
                          fix="check that the file is a complete Windows DLL") from exc


def pe_findings(name: str, dlls: list[str], *, abi3: bool) -> list[Finding]:
    """Judge a .pyd's imports: a debug runtime is an error, the MSVC runtime a note, and in a
    wheel tagged abi3 a versioned python3X.dll (which ties it to one Python) an error."""
    out: list[Finding] = []
    debug = [d for d in dlls if d in MSVC_DEBUG]
    if debug:
        out.append(Finding("error", f"{name} imports the debug runtime {', '.join(debug)}",
                           fix="build the Release configuration (/MD, not /MDd)"))
    runtime = [d for d in dlls if d in MSVC_RUNTIME]
    if runtime:
        out.append(Finding("note", f"{name} needs the VC++ redistributable "
                           f"({', '.join(runtime)})"))
    versioned = [d for d in dlls if _VERSIONED_PYTHON.match(d)]
    if abi3 and versioned:
        out.append(Finding("error", f"{name} is in an abi3 wheel but imports {versioned[0]}",
                           evidence="abi3 modules link python3.dll, the stable ABI's DLL",
                           fix="define Py_LIMITED_API and link python3.lib"))
    return out
