"""Verdicts: a table of rules over what the probes found, each with an id, a severity, the
evidence and the fix.

A rule is a function of `Findings` returning verdicts (none when it does not apply). Rule ids
are stable (they appear in `--json`); each has a unit test that fails if the rule breaks.
Target-dependent rules look at `Findings.targets` (from `--arch`, else the GPUs found); with no
target they say so once ("target", ok) instead of guessing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from packaging.version import Version

from flashbuild import platforms
from flashbuild.arch import Suffix
from flashbuild.detect.compilers import (
    HostWindow,
    MsvcToolset,
    cuda_accepting_gcc,
    cuda_accepting_msc,
    host_window,
)
from flashbuild.detect.host import HEAVY_JOB_BYTES, LIGHT_JOB_BYTES
from flashbuild.toolchain_facts import MSVC_TOOLSET_FOR_ALL_CUDA

if TYPE_CHECKING:
    from flashbuild.arch import Arch
    from flashbuild.detect.compilers import HostCompilers
    from flashbuild.detect.cuda import Toolkit, ToolkitSearch
    from flashbuild.detect.gpu import GpuReport
    from flashbuild.detect.host import HostInfo
    from flashbuild.detect.pyenv import PyEnvReport
    from flashbuild.platforms.base import Prerequisite

GIB = 1024**3
LOW_DISK_BYTES = 10 * GIB


class Severity(StrEnum):
    OK = "ok"
    WARN = "warn"
    ERROR = "error"


class Section(StrEnum):
    TARGET = "Targets"
    TOOLKIT = "CUDA toolkit"
    COMPILER = "Host compiler"
    GPU = "GPUs and driver"
    PYTHON = "Python and torch"
    TOOLS = "Build tools"
    HOST = "Machine"
    PROBES = "Probes"


@dataclass(frozen=True)
class Verdict:
    rule_id: str
    severity: Severity
    title: str
    evidence: str = ""
    fix: str = ""
    section: Section = Section.PROBES

    def to_json(self) -> dict[str, object]:
        return {"rule": self.rule_id, "severity": str(self.severity), "section": str(self.section),
                "title": self.title, "evidence": self.evidence, "fix": self.fix}


@dataclass(frozen=True)
class Findings:
    """Everything the probes found, plus the targets. Any probe may be None (it failed)."""

    platform: str
    toolkits: ToolkitSearch | None = None
    compilers: HostCompilers | None = None
    gpus: GpuReport | None = None
    pyenv: PyEnvReport | None = None
    host: HostInfo | None = None
    targets: tuple[Arch, ...] = ()
    target_origin: str = "none"
    """`--arch`, `gpus` or `none`."""
    probe_failures: tuple[tuple[str, str], ...] = field(default=())
    """(probe name, what went wrong)."""

    @property
    def toolkit(self) -> Toolkit | None:
        return self.toolkits.chosen if self.toolkits else None

    @property
    def window(self) -> HostWindow:
        tk = self.toolkit
        return host_window(tk.host_config if tk else None, tk.release if tk else None)


Rule = Callable[[Findings], list[Verdict]]
RULES: dict[str, Rule] = {}


def rule(rule_id: str) -> Callable[[Rule], Rule]:
    def register(func: Rule) -> Rule:
        RULES[rule_id] = func
        return func
    return register


def _v(rule_id: str, severity: Severity, section: Section, title: str,  # noqa: PLR0917
       evidence: str = "", fix: str = "") -> list[Verdict]:
    return [Verdict(rule_id, severity, title, evidence, fix, section)]


def _install(f: Findings, *needs: Prerequisite) -> str:
    """The command that installs `needs` on the machine doctor looked at."""
    return platforms.get(f.platform).install_command(needs, f.host.os_release if f.host else "")


#: Where a message sends the reader for which CUDA compiles which arch, and how the toolkit
#: is chosen (a test checks that every docs/ link a message cites exists).
TOOLKIT_DOC = "docs/pipeline.md#which-cuda-toolkit-a-build-uses"
TORCH_DOC = "docs/pipeline.md#torch-and-the-toolkit"


def _install_cuda(f: Findings, need: str = "a CUDA toolkit") -> str:
    """Install a toolkit: the project's CUDA extra, with the folder it lands in."""
    search = f.toolkits
    home = search.pypi_home if search else None
    named = search is not None and search.chosen is not None and bool(
        set(search.chosen.origins) & {"--cuda", "CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"})
    text = (f"install {need}: the project's CUDA extra (`pip install -e .[cuda]`) puts a "
            "complete CUDA 13.0 compiler from PyPI")
    if home is None:
        return text + " into this Python, or install CUDA from NVIDIA; then pass --cuda"
    return (text + f" into {home}" + (f", then pass `--cuda {home}`" if named else
                                      ", which flashbuild then chooses by itself")
            + "; or install CUDA from NVIDIA and pass --cuda with its folder")


def _use_found(f: Findings, archs: tuple[Arch, ...]) -> str | None:
    """`pass --cuda <root>` for the newest other toolkit found that compiles `archs`."""
    able = f.toolkits.able(archs) if f.toolkits else None
    if able is None:
        return None
    return (f"use the CUDA {able.version or able.release} found at {able.root}: pass "
            f"`--cuda {able.root}`")

# --- targets ------------------------------------------------------------------------------


@rule("target")
def _target_none(f: Findings) -> list[Verdict]:
    if f.targets:
        names = ", ".join(a.sm for a in f.targets)
        return _v("target", Severity.OK, Section.TARGET,
                  f"target: {names}", f"from {f.target_origin}")
    return _v("target", Severity.OK, Section.TARGET,
              "no target: target-dependent checks skipped",
              "no --arch was given and no NVIDIA GPU was found",
              "pass --arch (e.g. `--arch sm120` for an RTX 5090) to check a target")


@rule("target.a-other-sm")
def _a_other_sm(f: Findings) -> list[Verdict]:
    gpus = f.gpus.gpus if f.gpus else ()
    if not gpus:
        return []
    out: list[Verdict] = []
    for arch in f.targets:
        if arch.suffix is not Suffix.ARCH:
            continue
        if any(arch.runs_on(g.capability) for g in gpus):
            continue
        others = [t for t in f.targets if t != arch]
        runs_elsewhere = all(any(t.runs_on(g.capability) for t in others) for g in gpus)
        gpu_list = ", ".join(f"{g.name} ({g.sm})" for g in gpus)
        out += _v("target.a-other-sm", Severity.WARN if runs_elsewhere else Severity.ERROR,
                  Section.TARGET,
                  f"{arch.sm} code runs only on compute capability {arch.major}.{arch.minor}",
                  f"this machine's GPUs: {gpu_list}; `a` targets do not run on another SM "
                  "(docs/loading.md#what-the-shim-checks-at-import)",
                  f"build for the GPU you have (e.g. --arch {gpus[0].sm}) or add it to the list")
    return out


# --- toolkit ------------------------------------------------------------------------------


@rule("toolkit")
def _toolkit_missing(f: Findings) -> list[Verdict]:
    if f.toolkits is None:
        return []
    tk = f.toolkit
    if tk is None:
        seen = ", ".join(str(t.root) for t in f.toolkits.candidates) or "none"
        return _v("toolkit", Severity.ERROR, Section.TOOLKIT,
                  "no CUDA toolkit with nvcc was found",
                  f"candidates: {seen}; {f.toolkits.reason}", _install_cuda(f))
    version = str(tk.version) if tk.version else "version unknown"
    return _v("toolkit", Severity.OK, Section.TOOLKIT,
              f"CUDA {version} at {tk.root}", f"chosen because {f.toolkits.reason}")


@rule("toolkit.half-installed")
def _half_installed(f: Findings) -> list[Verdict]:
    tk = f.toolkit
    if tk is None or tk.has_headers:
        return []
    return _v("toolkit.half-installed", Severity.ERROR, Section.TOOLKIT,
              f"the toolkit at {tk.root} has nvcc but no headers",
              f"{tk.root / 'include' / 'cuda_runtime.h'} does not exist",
              "reinstall the toolkit with its runtime headers (PyPI: `pip install -e .[cuda]` "
              "brings cudart and crt), or choose another toolkit with "
              + next((f"`--cuda {t.root}`" for t in f.toolkits.candidates
                      if t is not tk and t.nvcc is not None and t.has_headers), "--cuda")
              if f.toolkits else "--cuda")


@rule("toolkit.version-unknown")
def _version_unknown(f: Findings) -> list[Verdict]:
    tk = f.toolkit
    if tk is None:
        return []
    out: list[Verdict] = []
    if tk.version is None:
        out += _v("toolkit.version-unknown", Severity.WARN, Section.TOOLKIT,
                  f"the version of the toolkit at {tk.root} is unknown",
                  "; ".join(tk.problems) or "nvcc, version.json and cuda.h gave no version",
                  f"run `{tk.nvcc or 'nvcc'} --version` by hand to see what is wrong")
    elif tk.problems:
        out += _v("toolkit.version-unknown", Severity.WARN, Section.TOOLKIT,
                  "nvcc did not answer every question", "; ".join(tk.problems),
                  f"run `{tk.nvcc} --list-gpu-code` by hand to see what is wrong")
    return out


@rule("toolkit.env-disagree")
def _env_disagree(f: Findings) -> list[Verdict]:
    if f.toolkits is None or not f.toolkits.disagreement:
        return []
    return _v("toolkit.env-disagree", Severity.WARN, Section.TOOLKIT,
              "CUDA_HOME/CUDA_PATH and the nvcc on PATH name different toolkits",
              f.toolkits.disagreement,
              "point both at one toolkit"
              + (f" (or pass `--cuda {f.toolkit.root}`); flashbuild uses {f.toolkit.root}"
                 if f.toolkit else "; flashbuild uses the one named by CUDA_HOME"))


@rule("toolkit.search-problem")
def _search_problem(f: Findings) -> list[Verdict]:
    if f.toolkits is None:
        return []
    out: list[Verdict] = []
    for problem in f.toolkits.problems:
        out += _v("toolkit.search-problem", Severity.WARN, Section.TOOLKIT,
                  "a CUDA setting points nowhere", problem,
                  "fix or unset it: tools that read it (CMake, torch) will fail or pick "
                  "another toolkit than flashbuild")
    return out


@rule("toolkit.too-old")
def _too_old(f: Findings) -> list[Verdict]:
    tk = f.toolkit
    if tk is None:
        return []
    out: list[Verdict] = []
    for arch in f.targets:
        if tk.arch_problem(arch) == "too-old":
            out += _v("toolkit.too-old", Severity.ERROR, Section.TOOLKIT,
                      f"CUDA {tk.release} cannot compile {arch.sm}",
                      f"{arch.sm} needs CUDA {arch.first_cuda()} or newer ({TOOLKIT_DOC}); "
                      f"the chosen toolkit is {tk.version} at {tk.root}, chosen because "
                      f"{f.toolkits.reason if f.toolkits else 'it was the only one'}",
                      _use_found(f, (arch,))
                      or _install_cuda(f, f"CUDA {arch.first_cuda()} or newer"))
    return out


@rule("toolkit.arch-removed")
def _removed(f: Findings) -> list[Verdict]:
    tk = f.toolkit
    if tk is None:
        return []
    out: list[Verdict] = []
    for arch in f.targets:
        if tk.arch_problem(arch) == "removed":
            out += _v("toolkit.arch-removed", Severity.ERROR, Section.TOOLKIT,
                      f"CUDA {tk.release} dropped {arch.sm}",
                      f"CUDA {arch.removed_in()} removed sm_50 … sm_72 and sm_101 "
                      "(sm_101 became sm_110)",
                      (_use_found(f, (arch,)) or "use a CUDA 12.x toolkit for this GPU")
                      + ", or drop it from --arch"
                      + (" (Thor is sm_110 in CUDA 13)" if arch.code == 101 else ""))
    return out


@rule("toolkit.codes")
def _cannot_emit(f: Findings) -> list[Verdict]:
    tk = f.toolkit
    if tk is None:
        return []
    out: list[Verdict] = []
    for arch in f.targets:
        if tk.arch_problem(arch) == "cannot-emit":
            out += _v("toolkit.codes", Severity.ERROR, Section.TOOLKIT,
                      f"nvcc at {tk.nvcc} cannot emit {arch.sm}",
                      f"`nvcc --list-gpu-code` lists: {' '.join(tk.codes)}",
                      _use_found(f, (arch,))
                      or "use a toolkit whose nvcc lists this code (--cuda)")
    if f.targets and not out and tk.codes and all(tk.arch_problem(a) is None
                                                    for a in f.targets):
        out += _v("toolkit.codes", Severity.OK, Section.TOOLKIT,
                  f"nvcc can emit {', '.join(a.sm for a in f.targets)}")
    return out


# --- host compiler ------------------------------------------------------------------------


def _msvc_in_use(f: Findings) -> tuple[int | None, str]:
    """(_MSC_VER, where from) of the MSVC a build would use: the activated `cl`, else the
    default toolset of the newest Visual Studio (what `vswhere -latest` and setuptools pick;
    FACTS.md)."""
    c = f.compilers
    if c is None:
        return None, ""
    if c.active_msvc is not None and c.active_msvc.msc_ver is not None:
        return c.active_msvc.msc_ver, f"`cl` on PATH is {c.active_msvc.cl_version}"
    studios = sorted(c.visual_studios, key=lambda v: Version(v.version or "0"))
    for vs in reversed(studios):
        toolset = vs.default
        if toolset is not None and toolset.msc_ver is not None:
            return toolset.msc_ver, (f"{vs.display_name or vs.path} defaults to toolset "
                                     f"{toolset.version}")
    return None, ""


def _working_toolset(f: Findings, window: HostWindow) -> MsvcToolset | None:
    c = f.compilers
    if c is None:
        return None
    fits = [t for vs in c.visual_studios for t in vs.toolsets
            if t.msc_ver is not None and window.accepts_msc(t.msc_ver)]
    return max(fits, key=lambda t: Version(t.version)) if fits else None


@rule("msvc.version")
def _msvc_window(f: Findings) -> list[Verdict]:
    c = f.compilers
    if c is None or c.family != "msvc":
        return []
    msc, where = _msvc_in_use(f)
    if msc is None:
        return _v("msvc.version", Severity.ERROR, Section.COMPILER,
                  "no MSVC (Visual Studio C++ toolset) was found",
                  "; ".join(c.problems) or "vswhere lists no installation with a "
                  "VC\\Tools\\MSVC toolset, and no `cl` is on PATH",
                  "install Visual Studio 2022 Build Tools with the \"Desktop development "
                  "with C++\" workload")
    window = f.window
    accepted = window.accepts_msc(msc)
    tk = f.toolkit
    if accepted is None or tk is None:
        return _v("msvc.version", Severity.OK, Section.COMPILER,
                  f"MSVC _MSC_VER {msc}", where + "; no toolkit window to check it against")
    span = f"{window.msc_min} ≤ _MSC_VER < {window.msc_end} ({window.source})"
    if accepted:
        return _v("msvc.version", Severity.OK, Section.COMPILER,
                  f"MSVC _MSC_VER {msc} is accepted by CUDA {tk.release}", f"{where}; {span}")
    working = _working_toolset(f, window)
    if working is not None:
        fix = (f"use the installed toolset {working.version}: `vcvarsall.bat x64 "
               f"-vcvars_ver={working.vcvars_ver}` (flashbuild passes it when it activates "
               "MSVC itself)")
    else:
        cuda = cuda_accepting_msc(msc)
        fix = (f"install CUDA {cuda} or newer, which accepts _MSC_VER {msc}" if cuda else
               f"install the MSVC toolset {MSVC_TOOLSET_FOR_ALL_CUDA} in the Visual Studio "
               "Installer")
        fix += "; or pass -allow-unsupported-compiler at your own risk (the STL may then "
        fix += "reject it with STL1002)"
    return _v("msvc.version", Severity.ERROR, Section.COMPILER,
              f"CUDA {tk.release}'s nvcc rejects MSVC _MSC_VER {msc}", f"{where}; nvcc accepts "
              f"{span}", fix)


@rule("gcc")
def _gcc_too_new(f: Findings) -> list[Verdict]:
    c = f.compilers
    if c is None or c.family != "gnu":
        return []
    gxx = c.gxx
    if gxx is None:
        return _v("gcc", Severity.ERROR, Section.COMPILER, "no g++ was found",
                  "nvcc needs a host C++ compiler on PATH", _install(f, "c++"))
    window = f.window
    tk = f.toolkit
    if gxx.version is None or tk is None:
        return _v("gcc", Severity.OK, Section.COMPILER,
                  f"{gxx.name} {gxx.version or '(version unknown)'}", gxx.path)
    is_clang = "clang" in gxx.name
    limit = window.clang_max if is_clang else window.gcc_max
    if limit is None or gxx.version.major <= limit:
        return _v("gcc", Severity.OK, Section.COMPILER,
                  f"{gxx.name} {gxx.version} is accepted by CUDA {tk.release}",
                  gxx.path + (f"; nvcc accepts major ≤ {limit}" if limit else ""))
    cuda = None if is_clang else cuda_accepting_gcc(gxx.version.major)
    return _v("gcc", Severity.ERROR, Section.COMPILER,
              f"CUDA {tk.release}'s nvcc rejects {gxx.name} {gxx.version}",
              f"{window.source} accepts {'clang' if is_clang else 'GCC'} ≤ {limit}",
              f"install g++-{limit} and set NVCC_CCBIN=g++-{limit} (CMake: CUDAHOSTCXX)"
              + (f", or use CUDA {cuda}+" if cuda else ""))


# --- GPUs and driver ----------------------------------------------------------------------


@rule("gpu")
def _gpu_found(f: Findings) -> list[Verdict]:
    if f.gpus is None:
        return []
    if not f.gpus.gpus:
        return _v("gpu", Severity.OK, Section.GPU, "no NVIDIA GPU found",
                  "that is fine for building; verification on a GPU is skipped")
    names = ", ".join(f"{g.name} ({g.sm})" for g in f.gpus.gpus)
    return _v("gpu", Severity.OK, Section.GPU, names,
              f"driver {f.gpus.driver_version}, supports CUDA ≤ {f.gpus.driver_cuda} "
              f"(via {f.gpus.source})")


@rule("driver.older-than-toolkit")
def _driver(f: Findings) -> list[Verdict]:
    tk = f.toolkit
    if f.gpus is None or not f.gpus.gpus or tk is None or tk.release is None \
            or f.gpus.driver_cuda is None:
        return []
    driver = f.gpus.driver_cuda
    if driver >= tk.release:
        return []
    major = driver.major < tk.release.major
    return _v("driver.older-than-toolkit", Severity.ERROR if major else Severity.WARN,
              Section.GPU,
              f"the driver supports CUDA {driver}, older than the toolkit's {tk.release}",
              f"driver {f.gpus.driver_version}; programs built with CUDA {tk.release} "
              + ("will not start (cudaErrorInsufficientDriver)" if major else
                 "rely on minor-version compatibility: PTX JIT and new APIs fail"),
              "update the NVIDIA driver, or build with a toolkit no newer than "
              f"CUDA {driver}")


# --- Python and torch ---------------------------------------------------------------------


@rule("python")
def _python(f: Findings) -> list[Verdict]:
    if f.pyenv is None:
        return []
    py = f.pyenv.python
    where = f"venv {py.venv}" if py.venv else "no virtual environment"
    out = _v("python", Severity.OK, Section.PYTHON,
             f"Python {py.version} ({py.implementation}, {py.abi_tag})",
             f"{py.executable}; {where}; extensions end in {py.ext_suffix}")
    torch = f.pyenv.torch
    if torch is None:
        out += _v("python", Severity.OK, Section.PYTHON, "torch is not installed",
                  "only torch extensions need it")
    elif not torch.problems:
        arches = ("unknown" if torch.arch_list is None else
                  " ".join(torch.arch_list) or "no GPU code (CPU build)")
        out += _v("python", Severity.OK, Section.PYTHON,
                  f"torch {torch.version} (CUDA {torch.cuda or 'none: CPU build'})",
                  f"compiled for: {arches}")
    return out


@rule("python.headers")
def _python_headers(f: Findings) -> list[Verdict]:
    py = f.pyenv.python if f.pyenv else None
    if py is None or py.python_h == "":
        return []
    if py.python_h is None:
        return _v("python.headers", Severity.ERROR, Section.PYTHON,
                  "Python's headers (Python.h) are not installed",
                  f"no Python.h in the include folder of {py.executable}: extensions, and "
                  "dependencies that pip builds from source (tree-sitter-cmake), fail with "
                  "\"Python.h: No such file or directory\"",
                  _install(f, "python-headers"))
    return _v("python.headers", Severity.OK, Section.PYTHON, "Python's headers are installed",
              py.python_h)


@rule("python.venv")
def _python_venv(f: Findings) -> list[Verdict]:
    py = f.pyenv.python if f.pyenv else None
    if py is None or py.venv_module:
        return []
    return _v("python.venv", Severity.WARN, Section.PYTHON,
              f"`{py.executable} -m venv` cannot create an environment with pip",
              "the venv or ensurepip module is missing from this Python",
              _install(f, "python-venv"))


@rule("torch.broken")
def _torch_broken(f: Findings) -> list[Verdict]:
    torch = f.pyenv.torch if f.pyenv else None
    if torch is None or not torch.problems:
        return []
    return _v("torch.broken", Severity.WARN, Section.PYTHON,
              "torch is installed but could not be read or imported",
              "; ".join(torch.problems),
              f"reinstall it: `{f.pyenv.python.executable if f.pyenv else 'python'} -m pip "
              "install --force-reinstall torch` (with the index URL of your CUDA build)")


@rule("torch.cuda")
def _torch_cuda(f: Findings) -> list[Verdict]:
    torch = f.pyenv.torch if f.pyenv else None
    tk = f.toolkit
    if torch is None or tk is None or tk.release is None:
        return []
    tcuda = torch.cuda_version
    if tcuda is None:
        if torch.version and not torch.problems:
            return _v("torch.cuda", Severity.WARN, Section.PYTHON,
                      f"torch {torch.version} is a CPU build",
                      "torch.version.cuda is None: torch extensions cannot use CUDA with it",
                      "install a CUDA build of torch matching the toolkit, e.g. the "
                      f"cu{tk.release.major}{tk.release.minor} wheels")
        return []
    if tcuda.major != tk.release.major:
        return _v("torch.cuda", Severity.ERROR, Section.PYTHON,
                  f"torch was built with CUDA {tcuda}, nvcc is CUDA {tk.release}",
                  "torch.utils.cpp_extension refuses a CUDA major-version mismatch "
                  f"({TORCH_DOC})",
                  f"install torch built for CUDA {tk.release.major}.x, or use a CUDA "
                  f"{tcuda.major}.x toolkit: "
                  + next((f"`--cuda {t.root}` (CUDA {t.release}, found there)"
                          for t in (f.toolkits.candidates if f.toolkits else ())
                          if t.nvcc is not None and t.release is not None
                          and t.release.major == tcuda.major), "pass --cuda with its folder"))
    if tcuda.minor != tk.release.minor:
        return _v("torch.cuda", Severity.WARN, Section.PYTHON,
                  f"torch was built with CUDA {tcuda}, nvcc is CUDA {tk.release}",
                  "torch.utils.cpp_extension only warns on a minor-version difference",
                  "usually fine; match them if you see undefined CUDA symbols at import")
    return _v("torch.cuda", Severity.OK, Section.PYTHON,
              f"torch {torch.version} (CUDA {tcuda}) matches nvcc")


@rule("torch.arch-missing")
def _torch_arch(f: Findings) -> list[Verdict]:
    torch = f.pyenv.torch if f.pyenv else None
    gpus = f.gpus.gpus if f.gpus else ()
    if torch is None or not torch.arch_list or not gpus or torch.cuda is None:
        return []
    out: list[Verdict] = []
    for gpu in gpus:
        major, minor = gpu.capability
        # SASS for sm_XY runs on XZ with Z ≥ Y (same major), so sm_120 code runs on 12.1.
        ok = any(code.startswith("sm_") and code[3:].rstrip("af").isdigit()
                 and int(code[3:].rstrip("af")) // 10 == major
                 and int(code[3:].rstrip("af")) % 10 <= minor for code in torch.arch_list)
        if not ok:
            out += _v("torch.arch-missing", Severity.WARN, Section.PYTHON,
                      f"torch {torch.version} has no kernels for {gpu.name} ({gpu.sm})",
                      f"torch.cuda.get_arch_list(): {' '.join(torch.arch_list)}; torch's own "
                      "ops will fail with \"no kernel image is available\"",
                      "install a torch build that includes this GPU (cu128+ wheels include "
                      f"sm_120; {TORCH_DOC})")
    return out


# --- build tools and machine --------------------------------------------------------------


@rule("ninja")
def _ninja(f: Findings) -> list[Verdict]:
    if f.pyenv is None:
        return []
    ninja = f.pyenv.tool("ninja")
    if ninja is None or ninja.path is None:
        return _v("ninja", Severity.ERROR, Section.TOOLS, "ninja was not found",
                  "builds run through ninja (parallel, resumable)",
                  "`pip install ninja` in this environment")
    return _v("ninja", Severity.OK, Section.TOOLS,
              f"ninja {ninja.version or '(version unknown)'}", ninja.path)


@rule("cmake")
def _cmake(f: Findings) -> list[Verdict]:
    if f.pyenv is None:
        return []
    cmake = f.pyenv.tool("cmake")
    if cmake is None or cmake.path is None:
        return _v("cmake", Severity.WARN, Section.TOOLS, "cmake was not found",
                  "recipes that build with CMake need it", "`pip install cmake`")
    return _v("cmake", Severity.OK, Section.TOOLS,
              f"cmake {cmake.version or '(version unknown)'}", cmake.path)


@rule("pybind11")
def _pybind11(f: Findings) -> list[Verdict]:
    if f.pyenv is None:
        return []
    found = f.pyenv.tool("pybind11")
    if found is None or found.version is None:
        return _v("pybind11", Severity.WARN, Section.TOOLS, "pybind11 was not found",
                  "recipes whose Python module is a pybind11 extension (the bundled csrc "
                  "one) need it at configure time", "`pip install pybind11`")
    return _v("pybind11", Severity.OK, Section.TOOLS, f"pybind11 {found.version}",
              found.path or "")


@rule("ram")
def _ram(f: Findings) -> list[Verdict]:
    h = f.host
    if h is None or h.free_ram is None:
        return []
    free = h.free_ram / GIB
    if h.free_ram < LIGHT_JOB_BYTES:
        severity = Severity.ERROR
    elif h.free_ram < HEAVY_JOB_BYTES:
        severity = Severity.WARN
    else:
        return _v("ram", Severity.OK, Section.HOST,
                  f"{h.cores} cores, {free:.1f} GiB free: up to {h.jobs_heavy} heavy / "
                  f"{h.jobs_light} light nvcc jobs at once")
    return _v("ram", severity, Section.HOST,
              f"only {free:.1f} GiB of memory is free",
              "a heavy nvcc job (CUTLASS templates) takes 3 to 5 GB; too many at once get OOM-"
              "killed (`cudafe++ died due to signal 9`, MSVC C1060)",
              "close other programs; flashbuild builds with -j1 here")


@rule("disk.low")
def _disk(f: Findings) -> list[Verdict]:
    h = f.host
    if h is None or h.free_disk is None or h.free_disk >= LOW_DISK_BYTES:
        return []
    return _v("disk.low", Severity.WARN, Section.HOST,
              f"only {h.free_disk / GIB:.1f} GiB free at {h.build_dir}",
              "a CUDA extension build can write several GB of objects",
              "free some space or build elsewhere")


@rule("windows.long-paths")
def _long_paths(f: Findings) -> list[Verdict]:
    h = f.host
    if h is None or h.long_paths_enabled is not False:
        return []
    return _v("windows.long-paths", Severity.WARN, Section.HOST,
              "Windows long paths are off",
              "paths over 260 characters fail in ninja, CMake and Python unless "
              "LongPathsEnabled=1 (https://learn.microsoft.com/en-us/windows/win32/fileio/"
              "maximum-file-path-limitation); cl.exe, link.exe and nvcc fail past 260 either "
              "way (they are not long-path aware: C1083, LNK1104)",
              "build in a short folder like C:\\b; also, as administrator: `reg add "
              "HKLM\\SYSTEM\\CurrentControlSet\\Control\\FileSystem /v LongPathsEnabled /t "
              "REG_DWORD /d 1 /f` for the other tools")


@rule("windows.path-hazard")
def _path_hazard(f: Findings) -> list[Verdict]:
    h = f.host
    if h is None:
        return []
    out: list[Verdict] = []
    for hazard in h.path_hazards:
        # A long build folder stays a hazard with LongPathsEnabled=1: cl.exe, link.exe and
        # nvcc do not declare longPathAware, so C1083/LNK1104 past 260 characters either way.
        why = {"spaces": "spaces break nvcc's MSVC environment setup",
               "long": "object paths below it may pass Windows' 260-character limit, which "
                       "cl.exe, link.exe and nvcc keep even with LongPathsEnabled=1",
               "non-ascii": "non-ASCII characters are mangled by tools that use the console "
                            "code page"}[hazard.what]
        out += _v("windows.path-hazard", Severity.WARN, Section.HOST,
                  f"the {hazard.role} path has {hazard.what.replace('-', ' ')}",
                  f"{hazard.path}: {why}",
                  f"use a short ASCII path without spaces (e.g. C:\\b) for the {hazard.role}")
    return out


@rule("probe.failed")
def _probe_failed(f: Findings) -> list[Verdict]:
    out: list[Verdict] = []
    for name, what in f.probe_failures:
        out += _v("probe.failed", Severity.WARN, Section.PROBES, f"probe {name} failed: {what}",
                  "its findings are missing from this report",
                  "rerun with --debug and report it if it persists")
    return out


def evaluate(findings: Findings) -> list[Verdict]:
    """Every rule over the findings; a rule that raises becomes a probe.failed warning."""
    verdicts: list[Verdict] = []
    for rule_id, func in RULES.items():
        try:
            verdicts += func(findings)
        except Exception as exc:  # a rule bug must not take the report down
            verdicts += _v("probe.failed", Severity.WARN, Section.PROBES,
                           f"rule {rule_id} failed: {type(exc).__name__}: {exc}",
                           fix="rerun with --debug and report it")
    return verdicts


def blocking(verdicts: list[Verdict]) -> bool:
    return any(v.severity is Severity.ERROR for v in verdicts)
