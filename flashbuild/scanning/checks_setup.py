"""setup.py rules: what users of setup.py trees hit, at the severity the tool would give it.

Read from `setuppy.SetupPy` (what the build does for the target) and `reach.Reach` (what the
compiled sources include). Each finding cites its evidence and the fix; often the fix is what
`flashbuild build` does anyway (no build isolation, the arch passed through the tree's own
switch), which a recipe can also say with `[[build.env]]`.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING, Any

from flashbuild.scanning.facts import CcclFacts
from flashbuild.scanning.findings import Category, Finding, Fix, ScanTarget, Severity
from flashbuild.scanning.proposals import (
    ChooseArchList,
    ForceBuild,
    NoStepNeeded,
    NvccAppendFlag,
)
from flashbuild.scanning.scan import read_source
from flashbuild.source.hostinclude import first_cccl_include
from flashbuild.source.reach import includes_header
from flashbuild.toolchain_facts import USE_CUDA_FROM_TORCH, ZC_PREPROCESSOR_FROM_CUDA

if TYPE_CHECKING:
    from pathlib import Path

    from flashbuild.scanning.facts import Facts
    from flashbuild.source.reach import Reach
    from flashbuild.source.setuppy import Extension, SetupPy

#: cl.exe options that mean "GCC syntax": D9002 "ignoring unknown option".
_GCC_ONLY = re.compile(r"^-(?:O3|Ofast|f[\w-]+|g\d?|std=[\w+]+|Wno-[\w-]+|Wextra|Wpedantic|"
                       r"l\w+|march=\S+|pthread)$")
"""cl accepts `-O2`, `-W4` and the like with a dash too; these it does not know."""
_TORCH_EXTENSION = "torch/extension.h"
#: setuptools' object folder below the tree on Windows
#: (build/temp.win-amd64-cpython-312/Release/) + a typical checkout prefix.
_OBJ_PREFIX = len("build/temp.win-amd64-cpython-312/Release/") + len("C:/Users/username/src/x/")
_MAX_PATH = 260


def setup_findings(root: Path, reach: Reach, target: ScanTarget) -> list[Finding]:
    setup = reach.setup
    if setup is None:
        return []  # a CMake build: no setup.py rules
    text = read_source(root, setup.path, 1 << 24)
    lines = text.splitlines() if isinstance(text, str) else []

    def snippet(line: int) -> str:
        return lines[line - 1].strip() if 0 < line <= len(lines) else ""

    def add(rule: str, category: Category, severity: Severity,  # noqa: PLR0917
            line: int, message: str,
            evidence: str, fix: Fix, path: str | None = None, snip: str | None = None,
            facts: Facts | None = None) -> None:
        out.append(Finding(rule=rule, category=category, path=path or setup.path, line=line,
                           col=1, severity=severity, message=message, evidence=evidence,
                           snippet=snippet(line) if snip is None else snip, fix=fix,
                           facts=facts))

    out: list[Finding] = []
    built = [e for e in setup.built_for_target() if e.cuda]
    if target.platform == "windows" and built:
        _zc_preprocessor(setup, built, add)
        _torch_headers(reach, built, add)
        _gcc_cxx_flags(setup, built, add)
        _long_paths(reach, add)
    _gencode(setup, built, target, add)
    if setup.gencode:
        _several_archs(setup, built, lines, add)
    _host_cccl(root, built, target, lines, add)
    _version_timestamp(root, setup, text if isinstance(text, str) else "", add)
    for line, what in setup.downloads:
        add("FB230", Category.SETUP_BUILD, Severity.WARNING, line,
            f"setup.py fetches during the build ({what}): an offline build fails here",
            f"`{snippet(line)[:100]}`",
            Fix(manual="set the tree's force-build switch (e.g. *_FORCE_BUILD=TRUE) with a "
                "recipe [[build.env]] table, and fetch submodules before building",
                env=ForceBuild()))
    _isolation(root, setup, target, add)
    return out


def _flag_present(flags: tuple[str, ...], flag: str) -> bool:
    return any(flag in f for f in flags)


def _zc_preprocessor(setup: SetupPy, built: list[Extension], add: _Add) -> None:
    lacking = [e for e in built if not _flag_present(e.nvcc_flags, "/Zc:preprocessor")]
    gated = [(line, flag, cond) for line, flag, cond in setup.windows_flags
             if "DISTUTILS_USE_SDK" in cond]
    sdk_only = [e for e in built if e not in lacking and gated and
                any("/Zc:preprocessor" in flag for _l, flag, _c in gated)]
    win_lines = sorted({line for line, _f, _c in setup.windows_flags})
    if lacking:
        first = lacking[0]
        line = win_lines[0] if win_lines else first.nvcc_line
        names = ", ".join(f"`{e.name}`" for e in lacking[:4]) + (
            f" and {len(lacking) - 4} more" if len(lacking) > 4 else "")
        where = (f"the Windows branch at line {line} adds no /Zc:preprocessor"
                 if win_lines else "setup.py has no Windows branch for the nvcc flags")
        add("FB200", Category.SETUP_FLAGS, Severity.ERROR, line,
            "nvcc never passes /Zc:preprocessor to cl.exe: with CUDA >= "
            f"{ZC_PREPROCESSOR_FROM_CUDA} the CCCL "
            "headers stop with #error C1189 under MSVC's traditional preprocessor",
            f"{where}; nvcc flags of {names} (flags at line {first.nvcc_line})",
            Fix(manual="add `-Xcompiler /Zc:preprocessor` to the nvcc flags on Windows; "
                "without editing setup.py a recipe sets it for nvcc: [[build.env]] when = "
                "{ platform = \"windows\" }, set = { NVCC_APPEND_FLAGS = "
                "\"-Xcompiler /Zc:preprocessor\" }",
                env=NvccAppendFlag(flag="-Xcompiler /Zc:preprocessor")))
    if gated:
        line = gated[0][0]
        add("FB201", Category.SETUP_FLAGS, Severity.WARNING, line,
            "the MSVC flags are added only when DISTUTILS_USE_SDK=1: a build without it "
            "gets none of them",
            f"`{gated[0][2]}` gates {', '.join(sorted({f for _l, f, _c in gated}))}"
            + (f" (needed by {len(sdk_only)} extension(s))" if sdk_only else ""),
            Fix(manual="set DISTUTILS_USE_SDK=1 for the build (a recipe [[build.env]] "
                "table on Windows), or pass the flags unconditionally on Windows"))


def _torch_headers(reach: Reach, built: list[Extension], add: _Add) -> None:
    sites: list[tuple[str, int, Extension]] = []
    for ext in built:
        if _flag_present(ext.nvcc_flags, "-DUSE_CUDA") or "USE_CUDA" in ext.define_macros:
            continue
        for src in ext.sources:
            if not src.endswith(".cu"):
                continue
            inc = includes_header(reach, src, _TORCH_EXTENSION)
            if inc is not None:
                sites.append((src, inc.line, ext))
    if not sites:
        return
    path, line, ext = sites[0]
    for other, other_line, _e in sites[1:]:
        # One error for the missing flag; each further site as a note, so every file that
        # breaks is named where it breaks.
        add("FB210", Category.TORCH_HEADERS, Severity.NOTE, other_line,
            f"this .cu file also pulls in <torch/extension.h> without -DUSE_CUDA (see "
            f"{path}:{line})", f"`{ext.name}` nvcc flags have no -DUSE_CUDA",
            Fix(manual="the same fix as the error at the first site",
                env=NvccAppendFlag(flag="-DUSE_CUDA")), path=other,
            snip=f"#include <{_TORCH_EXTENSION}> (directly or through this include)")
    others = sorted({p for p, _l, _e in sites[1:]})
    also = f"; also {len(others)} more .cu file(s): {', '.join(others[:4])}" + (
        " …" if len(others) > 4 else "") if others else ""
    add("FB210", Category.TORCH_HEADERS, Severity.ERROR, line,
        "this .cu file pulls in <torch/extension.h> and nvcc gets no -DUSE_CUDA: with torch "
        f">= {USE_CUDA_FROM_TORCH} on Windows cl stops with C2872 \"'std': ambiguous symbol\"",
        f"`{ext.name}` nvcc flags have no -DUSE_CUDA{also}",
        Fix(manual="add -DUSE_CUDA to the nvcc flags; without editing setup.py a recipe sets "
            "[[build.env]] when = { platform = \"windows\" }, set = { NVCC_APPEND_FLAGS = "
            "\"-DUSE_CUDA\" }", env=NvccAppendFlag(flag="-DUSE_CUDA")),
        path=path, snip=f"#include <{_TORCH_EXTENSION}> (directly or through this include)")


def _gcc_cxx_flags(setup: SetupPy, built: list[Extension], add: _Add) -> None:
    for ext in built:
        gcc = [f for f in ext.cxx_flags if _GCC_ONLY.match(f)]
        if not gcc:
            continue
        add("FB202", Category.SETUP_FLAGS, Severity.WARNING, ext.line,
            f"GCC-only cxx flags reach cl.exe ({' '.join(gcc[:6])}): cl warns D9002 and "
            "ignores them",
            f"`{ext.name}` extra_compile_args cxx = {list(ext.cxx_flags)[:8]}",
            Fix(manual="none needed to build; pass MSVC equivalents (/O2, /openmp) under "
                "`if sys.platform == 'win32'` to get the intended optimisation"))
        return  # one finding per setup.py: every extension shares the flag list here


def _gencode(setup: SetupPy, built: list[Extension], target: ScanTarget, add: _Add) -> None:
    in_flags = [(line, lit) for line, lit in setup.gencode
                if any(lit in e.nvcc_flags for e in built)]
    if not in_flags:
        return
    codes = sorted({int(c) for _l, lit in in_flags for c in re.findall(r"sm_(\d+)", lit)})
    listed = ", ".join(f"sm_{c}" for c in codes)
    line = in_flags[0][0]
    missing = [a for a in target.archs if a.code not in codes]
    if missing:
        add("FB220", Category.ARCH_SELECTION, Severity.ERROR, line,
            f"the hard-coded gencode list ({listed}) lacks {missing[0].sm}: the module loads "
            "but every kernel fails with 'no kernel image is available' on that GPU",
            f"{len(in_flags)} arch literal(s) in nvcc flags, first at line {line}; torch "
            "ignores TORCH_CUDA_ARCH_LIST when a flag names an arch",
            Fix(manual="edit the gencode list (a recipe macro-edit on setup.py) to the target "
                "arch", env=ChooseArchList()))
        return
    switches = [name for name, _l in setup.env_switches
                if "ARCH" in name.upper() and name != "TORCH_CUDA_ARCH_LIST"
                and not re.search(r"HIP|ROCM", name.upper())]
    chosen = f" (the tree picks from it with {', '.join(switches)})" if switches else ""
    add("FB220", Category.ARCH_SELECTION, Severity.WARNING, line,
        f"the gencode list is hard-coded ({listed}){chosen}: TORCH_CUDA_ARCH_LIST cannot "
        f"narrow it, so a {target.archs[0].sm} build may compile {len(codes)} targets",
        f"{len(in_flags)} arch literal(s) in nvcc flags, first at line {line}; torch adds no "
        "arch flags when one names an arch",
        Fix(manual="to build only the target, narrow the list in setup.py (a recipe step); "
            "the tree's own arch switch, if any, through [[build.env]]", env=ChooseArchList()))


_ARCH_IN_PATH = re.compile(r"(?:^|[/_.-])sm_?(\d{2,3})[af]?(?=[/_.-]|$)", re.IGNORECASE)


def _several_archs(setup: SetupPy, built: list[Extension], lines: list[str],
                   add: _Add) -> None:
    """FB221: sources named for two or more archs in one extension, under a hard-coded
    gencode list (so every source is compiled for every listed arch)."""
    for ext in built:
        by_arch: dict[int, list[str]] = {}
        for src in ext.sources:
            m = _ARCH_IN_PATH.search(src)
            if m and src.endswith(".cu"):
                by_arch.setdefault(int(m[1]), []).append(src)
        if len(by_arch) < 2 or ext.condition:
            continue
        first = min((s for group in by_arch.values() for s in group),
                    key=lambda s: _line_of(lines, s, ext.line))
        line = _line_of(lines, first, ext.line)
        counts = " and ".join(f"{len(v)} sm{k}" for k, v in sorted(by_arch.items()))
        add("FB221", Category.ARCH_SELECTION, Severity.WARNING, line,
            f"`{ext.name}` lists {counts} sources unconditionally: each is compiled for every "
            "arch of the hard-coded gencode list, and a switch that drops an arch's gencode "
            "keeps its sources",
            f"sources from line {line}; gencode at line {setup.gencode[0][0]}",
            Fix(manual="none needed to build; to save build time, list each arch's sources "
                "under the same switch as its gencode"))
        return


def _line_of(lines: list[str], needle: str, default: int) -> int:
    name = needle.rpartition("/")[2]
    return next((i for i, text in enumerate(lines, 1) if name in text), default)


def _host_cccl(root: Path, built: list[Extension], target: ScanTarget,
               lines: list[str], add: _Add) -> None:
    """FB222: a host-compiled source of a CUDA extension reaches a CCCL header, and nothing
    puts <CUDA_HOME>/include/cccl on the host compiler's path."""
    def read(rel: str) -> str | None:
        path = root / rel
        try:
            return path.read_text(encoding="utf-8", errors="replace") if path.is_file() \
                else None
        except OSError:
            return None

    for ext in built:
        flags = " ".join((*ext.include_dirs, *ext.cxx_flags))
        if "cccl" in flags:
            continue
        for src in ext.sources:
            if src.endswith(".cu") or src.endswith(".cuh"):
                continue
            found = first_cccl_include(src, ext.include_dirs, read, target.platform)
            if found is None:
                continue
            line = next((i for i, text in enumerate(lines, 1)
                         if i >= ext.line and "include_dirs" in text), ext.line)
            chain = " → ".join(found.chain)
            add("FB222", Category.SETUP_FLAGS, Severity.ERROR, line,
                f"include_dirs lack <CUDA_HOME>/include/cccl: with CUDA 13 the host compile "
                f"of {src} reaches <{found.header}> and stops with 'No such file or "
                "directory'",
                f"{chain} → <{found.header}> (static reading: the `#if` branches a plain host "
                "compile takes); torch's cpp_extension adds only <CUDA_HOME>/include",
                Fix(manual="add os.path.join(CUDA_HOME, 'include', 'cccl') to include_dirs; "
                    "flashbuild's build puts it on the host include path (CPLUS_INCLUDE_PATH "
                    "/ INCLUDE) itself",
                    step=NoStepNeeded(stage="build", reason="`flashbuild build` gives the host "
                                      "compiler CUDA 13's include/cccl")),
                facts=CcclFacts(source=src, header=found.header))
            return


def _clock_names(tree: Any) -> tuple[dict[str, list[Any]], set[str]]:
    """Each name's assignments, and the names some assignment takes from the clock
    (directly or through another such name)."""
    assigned: dict[str, list[ast.Assign]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for tgt in node.targets:
                if isinstance(tgt, ast.Name):
                    assigned.setdefault(tgt.id, []).append(node)
    timed: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, nodes in assigned.items():
            if name not in timed and any(
                    _CLOCK.search(ast.unparse(n.value)) or
                    {x.id for x in ast.walk(n.value) if isinstance(x, ast.Name)} & timed
                    for n in nodes):
                timed.add(name)
                changed = True
    return assigned, timed


_CLOCK = re.compile(r"\b(?:now|utcnow|today|time|strftime|gmtime|localtime)\s*\(")


def _version_timestamp(root: Path, setup: SetupPy, text: str, add: _Add) -> None:
    """FB233: `setup(version=…)` built from a variable that one of its assignments takes
    from the clock (typically the fallback when `git rev-parse` fails)."""
    if "version" not in text or not _CLOCK.search(text):
        return
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return
    assigned, timed = _clock_names(tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("setup")):
            continue
        version = next((k.value for k in node.keywords if k.arg == "version"), None)
        if version is None:
            continue
        used = [n.id for n in ast.walk(version) if isinstance(n, ast.Name) and n.id in timed]
        if not used and not _CLOCK.search(ast.unparse(version)):
            continue
        first = min((a.lineno for n in used for a in assigned[n]), default=version.lineno)
        has_git = (root / ".git").exists()
        add("FB233", Category.SETUP_BUILD, Severity.WARNING if has_git else Severity.ERROR,
            first, "the version can come from the clock: pip runs setup.py for the metadata "
            "and again for the wheel, gets two versions and rejects the wheel",
            f"setup(version={ast.unparse(version)}) at line {version.lineno}; "
            f"{', '.join(used) or 'it'} is taken from the time when the first source fails"
            + ("" if has_git else " (this tree has no .git, so it does)"),
            Fix(manual="build from a git checkout, or pin the version (the tree's own version "
                "variable, or a recipe step that replaces the timestamp)"))
        return


def _isolation(root: Path, setup: SetupPy, target: ScanTarget, add: _Add) -> None:
    if not setup.uses_cpp_extension:
        return
    fix = Fix(manual="build with --no-build-isolation against the installed CUDA torch "
              "(flashbuild's setuptools build does)")
    text = read_source(root, "pyproject.toml", 1 << 20)
    m = re.search(r"^\[build-system\][^\[]*?requires\s*=\s*\[(.*?)\]", text, re.S | re.M) \
        if isinstance(text, str) else None
    if m is None:
        # No pyproject.toml, or none whose [build-system] lists requirements: pip builds
        # with setuptools alone in an isolated environment (PEP 517's default, and from pip
        # 25.3 the only way it builds a project), where `import torch` fails.
        setup_text = read_source(root, setup.path, 1 << 24)
        first = re.search(r"^\s*(?:import\s+torch\b|from\s+torch\b)", setup_text, re.M) \
            if isinstance(setup_text, str) else None
        line = setup_text.count("\n", 0, first.start()) + 1 \
            if first is not None and isinstance(setup_text, str) else 1
        what = "no pyproject.toml" if not isinstance(text, str) else \
            "a pyproject.toml whose [build-system] lists no requires"
        add("FB231", Category.SETUP_BUILD, Severity.WARNING, line,
            "`pip install .` with build isolation fails at `import torch`",
            f"setup.py imports torch and the tree has {what}: pip builds it in an isolated "
            "environment with setuptools alone (pip 25.3 and later always)", fix)
        return
    line = text[:m.start()].count("\n") + 1 if isinstance(text, str) else 1
    requires = re.findall(r"[\"']([^\"']+)[\"']", m[1])
    has_torch = any(re.match(r"torch\b", r) for r in requires)
    if has_torch and target.platform != "windows":
        return
    why = ("its [build-system] requires torch: an isolated build installs PyPI's torch, "
           "which is CPU-only on Windows" if has_torch else
           "setup.py imports torch but [build-system] requires does not list it: an "
           "isolated build fails at `import torch`")
    add("FB231", Category.SETUP_BUILD, Severity.WARNING, line,
        "`pip install .` with build isolation builds against the wrong torch", why, fix,
        path="pyproject.toml", snip=f"requires = {requires}")


def _long_paths(reach: Reach, add: _Add) -> None:
    longest = max(reach.compiled, key=len, default="")
    if longest and _OBJ_PREFIX + len(longest) + len(".obj") > _MAX_PATH:
        add("FB232", Category.SETUP_BUILD, Severity.WARNING, 1,
            f"the object file of {longest} will pass 260 characters under a typical Windows "
            "checkout",
            f"{_OBJ_PREFIX} characters of build/temp folder and checkout prefix + "
            f"{len(longest)} of source path",
            Fix(manual="build from a short folder (e.g. C:\\b); LongPathsEnabled does not help, "
                "cl.exe, link.exe and nvcc are not long-path aware"), path=longest, snip="")


if TYPE_CHECKING:
    from typing import Protocol

    class _Add(Protocol):
        def __call__(self, rule: str, category: Category,  # noqa: PLR0917
                     severity: Severity, line: int,
                     message: str, evidence: str, fix: Fix, path: str | None = None,
                     snip: str | None = None, facts: Facts | None = None) -> None: ...
