"""`flashbuild scan`: read a kernel tree and list what will break for a target platform/arch.

The pipeline is: walk the tree (`os.scandir`, skipping VCS/build folders and vendored code —
submodules, third_party/-style folders, CUTLASS/CCCL copies recognised by content — never
following a symlink loop) → what the build compiles for the target and what those sources
include: given a `TreeModel` (the configured build, asked by pipeline/scan.py), its targets'
sources and their real include folders; else, for a setup.py tree, its extensions as read
(`reach`, `setuppy`); the rest is left out with one note per folder → the macros each C++
file's headers define (`ppgraph`) → run the checks for each file's kind (C++/CUDA, CMake,
Python) in worker processes (binary, non-UTF-8 and oversized files are skipped with a note) →
combine what needs the whole tree (build-system gating of arch-specific sources,
explicit-instantiation sites as the `explicit-instantiations` transform sees them, NOMINMAX and
_USE_MATH_DEFINES defined by the build, the C++ standard it names, units that get no <cstdint>,
library headers no include folder holds, the setup.py rules) → the findings whose verdict hangs
on a gate checked against the real preprocessor when a toolkit is found (`truth`) → instruction
findings no kernel compiled for the target reaches made notes (`callgraph`) → the remaining
instruction findings confirmed by compiling when that is cheap (`compiletruth`) → one
`ScanResult`. `ScanOptions.static` runs no tool at all.

Every `Finding` names its rule, category, place (file:line:col), a snippet, a severity for the
target, the evidence that triggered it, and the fix: a transform with a params sketch, or a
manual step. False positives are bugs, so each rule fires only on positive evidence.
"""

from __future__ import annotations

import os
import re
import stat
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flashbuild import buildsystems
from flashbuild.console import plural
from flashbuild.errors import UsageError
from flashbuild.scanning.checks_cmake import build_gates, check_cmake, tree_defines
from flashbuild.scanning.checks_lang import (
    below_cxx20,
    cstdint_findings,
    library_header_findings,
    machine_include_dirs,
    math_constants_with_torch,
    standards,
    wheel_include_dirs,
)
from flashbuild.scanning.checks_python import check_python
from flashbuild.scanning.compiletruth import confirm_by_compiling
from flashbuild.scanning.facts import (
    DesignatedInitFacts,
    ExtensionImportFacts,
    InstructionFacts,
    LibraryNameFacts,
    PluginExportFacts,
    TreeCheck,
    needs_of,
)
from flashbuild.scanning.findings import (
    Category,
    FileKind,
    FileReport,
    FileText,
    Finding,
    Fix,
    KernelCount,
    ScanOptions,
    ScanResult,
    ScanTarget,
    Severity,
    Skipped,
    Stage,
    Truth,
)
from flashbuild.scanning.placeholders import (
    kernel_counts,
    major_checks_guarding,
    placeholder_findings,
)
from flashbuild.scanning.proposals import LOADER_SHIM, handled_by_build
from flashbuild.scanning.truth import apply_preprocessor, includers_of
from flashbuild.source import cxx, separable
from flashbuild.source.pp import device_pass
from flashbuild.source.ppgraph import as_wire, graph_from, scan_header
from flashbuild.source.reach import (
    Reach,
    compute_reach,
    count_files,
    from_model,
    gitmodule_paths,
    vendored_library,
)
from flashbuild.source.setuppy import builds_nothing, read_setup
from flashbuild.source.text import decode, not_text_reason

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from flashbuild.arch import Arch
    from flashbuild.buildsystems import BuildSystem
    from flashbuild.scanning.checks_lang import Standard
    from flashbuild.source.text import Encoding
    from flashbuild.source.treemodel import JitSite, TreeModel

# --- per-file work ------------------------------------------------------------------------

CXX_SUFFIXES = frozenset({".cu", ".cuh", ".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp",
                          ".hxx", ".inl", ".inc", ".ipp", ".tcc"})
SKIP_DIRS = frozenset({".git", ".hg", ".svn", ".flashbuild", "__pycache__", ".venv", "venv",
                       "node_modules", ".tox", ".mypy_cache", ".ruff_cache", ".pytest_cache",
                       "build", "_build", "dist"})
SKIP_DIR_PREFIXES = ("build-", "build_", "cmake-build-")
VENDORED_DIRS = frozenset({"third_party", "third-party", "thirdparty", "3rdparty", "vendor",
                           "vendored", "external", "extern"})
#: Below this many files a pool costs more than it saves.
SERIAL_BELOW = 48


def file_kind(name: str) -> FileKind | None:
    if name == "CMakeLists.txt" or name.endswith(".cmake"):
        return "cmake"
    if name.endswith(".py"):
        return "python"
    dot = name.rfind(".")
    if dot >= 0 and name[dot:].lower() in CXX_SUFFIXES:
        return "cxx"
    return None


def read_source(root: Path, rel: str, max_bytes: int) -> str | Skipped:
    """The text of a file, or why it is skipped. Never raises for a bad file."""
    read = read_source_as(root, rel, max_bytes)
    return read if isinstance(read, Skipped) else read[0]


def read_source_as(root: Path, rel: str, max_bytes: int) -> tuple[str, Encoding] | Skipped:
    """The text of a file and the encoding it was read in (patch's reader, source/text.py:
    UTF-8, UTF-16 with a BOM, else Latin-1 byte for byte), or why it is skipped."""
    path = root / rel
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            # A FIFO or device blocks a read forever: not a source file, whoever asks.
            return Skipped(rel, "not a regular file (a FIFO, socket or device)")
        size = info.st_size
        if size > max_bytes:
            return Skipped(rel, f"{size / 1048576:.1f} MiB, above the {max_bytes // 1048576} "
                           "MiB cap for a source file (generated?)")
        data = path.read_bytes()
    except OSError as exc:
        return Skipped(rel, f"unreadable: {exc.strerror or exc}")
    decoded = decode(data)
    if decoded is None:
        return Skipped(rel, f"binary file, not text: {not_text_reason(data)}")
    return decoded[0].removeprefix("\ufeff"), decoded[1]


def _check_file(args: tuple[str, str, FileKind, ScanTarget, int, Any]) -> FileReport:
    root, rel, kind, target, max_bytes, inherited = args
    read = read_source_as(Path(root), rel, max_bytes)
    if isinstance(read, Skipped):
        return FileReport(rel, skipped=[read])
    report = check_text(FileText(rel, kind, read[0]), target, inherited)
    if read[1] != "utf-8":
        report.findings.append(encoding_note(rel, read[1], read[0]))
    return report


def encoding_note(rel: str, encoding: Encoding, text: str) -> Finding:
    """The note that a file was read as something other than UTF-8, at its first non-ASCII
    character (it is scanned all the same; before, a Latin-1 file was skipped unchecked)."""
    at = next((i for i, ch in enumerate(text) if ord(ch) > 127), 0)
    line = text.count("\n", 0, at) + 1
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    how = ("Latin-1, byte for byte (not UTF-8, no NUL bytes)" if encoding == "latin-1"
           else f"{encoding.upper()} (by its byte-order mark)")
    return Finding(
        rule="FB010", category=Category.SOURCE_TEXT, path=rel, line=line,
        col=at - start + 1, severity=Severity.NOTE, message=f"read as {how} and scanned",
        evidence=f"encoding {encoding}; first non-ASCII character {text[at]!r} "
        f"(U+{ord(text[at]):04X})" if text else f"encoding {encoding}",
        snippet=text[start:end if end >= 0 else None].strip()[:200] or "(empty)",
        fix=Fix(manual="nothing to do: `flashbuild patch` reads it the same way and writes it "
                "back in its own encoding (convert it to UTF-8 to drop this note)"))


def check_text(file: FileText, target: ScanTarget, inherited: Any = None) -> FileReport:
    """Run the checks for one file's kind. Pure: no filesystem access. `inherited`: the
    macros the headers it includes define (`ppgraph.as_wire`), for C++ files."""
    if file.kind == "cxx":
        from flashbuild.scanning.checks_cxx import check_cxx  # noqa: PLC0415  # cycle

        return check_cxx(file, target, inherited)
    if file.kind == "cmake":
        return check_cmake(file, target)
    return check_python(file, target)


# --- the walk -------------------------------------------------------------------------------

@dataclass
class Walk:
    files: list[tuple[str, FileKind]] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    vendored: list[str] = field(default_factory=list)
    """Vendored folders left out (tree-relative)."""


def _vendored_why(folder: Path, rel: str, name: str, submodules: frozenset[str],
                  library: Any) -> str:
    """Why a folder is vendored code ("" when it is the project's own): a git submodule, a
    conventional vendor folder name, or a known library recognised by its content."""
    if rel in submodules:
        return "git submodule in .gitmodules"
    if name.lower() in VENDORED_DIRS:
        return f"a `{name}/` folder"
    lib: str | None = library(folder)
    return f"a copy of {lib}" if lib else ""


def walk_tree(root: Path, *, include_vendored: bool = False  # noqa: PLR0912, PLR0915
              ) -> Walk:
    """Every scannable file under `root`, depth first, sorted; skipped folders with a note.

    Symlinked folders are followed once: a folder whose (device, inode) was already visited is
    a loop or a duplicate and is skipped with a note, so `a/link -> ..` cannot recurse."""
    out = Walk()
    try:
        st = root.stat()
    except OSError as exc:
        raise UsageError(f"cannot scan {root}: {exc.strerror or exc}",
                         fix="pass an existing, readable folder") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"cannot scan {root}: it is not a folder",
                         fix="pass the root folder of the source tree")
    seen: set[tuple[int, int]] = {(st.st_dev, st.st_ino)}
    stack: list[str] = [""]
    submodules = gitmodule_paths(root)
    while stack:
        rel_dir = stack.pop()
        folder = root / rel_dir if rel_dir else root
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            out.skipped.append(Skipped(rel_dir or ".", f"unreadable folder: "
                                       f"{exc.strerror or exc}"))
            continue
        subdirs: list[str] = []
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=True)
                is_file = not is_dir and entry.is_file(follow_symlinks=True)
            except OSError as exc:
                out.skipped.append(Skipped(rel, f"unreadable: {exc.strerror or exc}"))
                continue
            if is_dir:
                name = entry.name
                if name in SKIP_DIRS or name.startswith(SKIP_DIR_PREFIXES) or \
                        name.endswith(".egg-info"):
                    continue
                if not include_vendored:
                    why = _vendored_why(root / rel, rel, name, submodules,
                                        vendored_library)
                    if why:
                        n = count_files(root / rel)
                        out.skipped.append(Skipped(rel, f"vendored ({why}): "
                                                   f"{plural(n, 'file')}, not scanned "
                                                   "(fixes belong upstream; "
                                                   "--include-vendored scans it)"))
                        out.vendored.append(rel)
                        continue
                try:
                    dst = entry.stat(follow_symlinks=True)
                except OSError as exc:
                    out.skipped.append(Skipped(rel, f"unreadable: {exc.strerror or exc}"))
                    continue
                key = (dst.st_dev, dst.st_ino)
                if key in seen:
                    out.skipped.append(Skipped(rel, "symlink to a folder already scanned "
                                               "(a loop or a duplicate)"))
                    continue
                seen.add(key)
                subdirs.append(rel)
            elif is_file:
                kind = file_kind(entry.name)
                if kind is None:
                    continue
                outside = _outside(root, rel) if entry.is_symlink() else None
                if outside is not None:
                    out.skipped.append(Skipped(rel, f"a link to {outside}, outside the tree: "
                                               "not read (scan reads only the tree)"))
                else:
                    out.files.append((rel, kind))
            elif file_kind(entry.name) is not None or entry.is_symlink():
                out.skipped.append(Skipped(rel, _not_regular(entry)))
        stack.extend(reversed(subdirs))
    out.files.sort()
    return out


def _outside(root: Path, rel: str) -> str | None:
    """Where a symlinked file leads when that is outside the tree, else None."""
    real = os.path.realpath(root / rel)
    return None if Path(real).is_relative_to(root) else real


def _not_regular(entry: os.DirEntry[str]) -> str:
    """Why a directory entry that is neither a folder nor a regular file was not read: a
    FIFO would block the reader, a device never ends."""
    try:
        mode = entry.stat(follow_symlinks=True).st_mode
    except OSError:
        return "broken symlink"
    kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else
            "a character device" if stat.S_ISCHR(mode) else
            "a block device" if stat.S_ISBLK(mode) else
            "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
    via = " (through a symlink)" if entry.is_symlink() else ""
    return f"{kind}{via}, not a regular file: not read"


# --- the scan -------------------------------------------------------------------------------

def scan_tree(root: Path, target: ScanTarget, options: ScanOptions | None = None, *,
              model: TreeModel | None = None, stage: Stage | None = None) -> ScanResult:
    """Scan a tree for the target. Bad files and folders become `skipped` notes.

    `model`: what the configured build compiles (pipeline/introspect.py), for this target.
    Then its sources (and what they include through their real include folders) are the
    compiled files, the rest is "not compiled by this configuration", and the preprocessor
    runs each unit with its real flags; None reads the build files as text instead.
    `stage` is told what the scan starts doing (reading, preprocessing, compiling)."""
    opts = options or ScanOptions()
    tell: Stage = stage or (lambda _what: None)
    start = time.perf_counter()
    root = root.resolve()
    walk = walk_tree(root, include_vendored=opts.include_vendored)
    reach, setup_note = build_reach(root, walk, target, opts.max_file_bytes)
    if model is not None:
        reach = _model_reach(root, walk, model, reach, opts.max_file_bytes)
    files = walk.files
    not_built: list[Skipped] = []
    if reach is not None:
        def jit() -> tuple[JitSite, ...]:
            if model is not None:
                return model.jit
            from flashbuild.source.treemodel import find_jit  # noqa: PLC0415  # start-up

            return find_jit(root, [rel for rel, kind in walk.files if kind == "python"])

        files, not_built = _reachable_files(walk.files, reach, model, jit)
    jobs = opts.jobs or os.cpu_count() or 1
    tell(f"reading {plural(len(files), 'file')}")
    cxx = [(str(root), rel, opts.max_file_bytes) for rel, kind in files if kind == "cxx"]
    reports: list[FileReport]
    if jobs <= 1 or len(files) < SERIAL_BELOW:
        headers = [_header_facts(c) for c in cxx]
        work = _work(root, files, target, opts, reach, headers)
        reports = [_check_file(w) for w in work]
    else:
        pool_type = ProcessPoolExecutor if opts.executor == "process" else ThreadPoolExecutor
        _preload(kinds={kind for _rel, kind in files})
        with pool_type(max_workers=jobs) as pool:
            # Two passes on one pool: what each file defines and includes (for the macros
            # along the include graph), then the checks with those macros.
            headers = list(pool.map(_header_facts, cxx,
                                    chunksize=max(8, len(cxx) // (jobs * 8))))
            work = _work(root, files, target, opts, reach, headers)
            reports = list(pool.map(_check_file, work,
                                    chunksize=max(8, len(work) // (jobs * 8))))
    inherited = {w[1]: w[5] for w in work if w[2] == "cxx"}
    findings, kernels = combine(root, reports, target, reach, model)
    # The preprocessor first (it can decide a gate the static reader could not), then the
    # call graph (an instruction the pass keeps still needs a kernel that reaches it).
    findings, truth = apply_preprocessor(root, findings, reach, target, opts, stage=tell)
    if model is not None:
        truth = f"{_model_line(model)}; {truth}"
    findings = unreached_instructions(root, findings, target, inherited, opts.max_file_bytes)
    findings, compiled = confirm_by_compiling(root, findings, reach, target, opts, stage=tell)
    if compiled:
        truth = f"{truth}; {compiled}"
    skipped = [*walk.skipped, *not_built, *(s for r in reports for s in r.skipped)]
    if setup_note and not any(s.path == "setup.py" for s in skipped):
        skipped.append(Skipped("setup.py", setup_note))
    unread = next((s.reason for s in skipped if s.path == "setup.py"), "")
    system = buildsystems.get(model.system) if model is not None else build_system(root)
    findings = mark_handled(findings, backend=system.name if system is not None else None)
    return ScanResult(
        root=root, target=target, findings=tuple(sorted(findings, key=Finding.sort_key)),
        skipped=tuple(sorted(skipped, key=lambda s: s.path)),
        files_scanned=sum(1 for r in reports if not r.skipped),
        seconds=time.perf_counter() - start,
        setup=reach.setup if reach is not None else None, vendored=tuple(walk.vendored),
        setup_unreadable=unread, truth=truth, kernels=kernels,
        read=frozenset(r.path for r in reports if not r.skipped))


def mark_handled(findings: list[Finding], *, backend: str | None) -> list[Finding]:
    """Each finding `flashbuild build` takes care of by itself (proposals.handled_by_build,
    the decision `recipe init` lists as "Handled without a step") says why, and is at most a
    warning: a scan error means the build fails without a change (exit 11)."""
    out = []
    for f in findings:
        why = handled_by_build(f, backend=backend)
        out.append(replace(f, handled=why, severity=Severity.WARNING
                           if f.severity is Severity.ERROR else f.severity) if why else f)
    return out


def unreached_instructions(root: Path, findings: list[Finding], target: ScanTarget,
                           files: Mapping[str, Any], max_bytes: int) -> list[Finding]:
    """FB160 errors in device functions that no kernel compiled for the target reaches
    become notes (`callgraph`): ptxas never sees them."""
    from flashbuild.scanning.callgraph import CallGraph  # noqa: PLC0415  # cycle
    def read(rel: str) -> str | None:
        text = read_source(root, rel, max_bytes)
        return text if isinstance(text, str) else None

    graphs: dict[Arch, CallGraph] = {}
    out: list[Finding] = []
    for f in findings:
        facts = f.facts
        if not isinstance(facts, InstructionFacts) or f.severity is not Severity.ERROR or \
                facts.owner != "entity" or not facts.owner_names:
            out.append(f)
            continue
        names = facts.owner_names
        if facts.arch not in graphs:
            graphs[facts.arch] = CallGraph(files, read, target,
                                           device_pass(target.platform, facts.arch))
        graph = graphs[facts.arch]
        if graph.reached(names):
            out.append(f)
            continue
        what = ", ".join(f"`{n}`" for n in names)
        out.append(replace(
            f, severity=Severity.NOTE, truth=Truth.STATIC,
            message=f"`{facts.instruction}` sits in {what}, which no kernel compiled for "
            f"{graph.device.name.removeprefix('device ')} reaches: ptxas never sees it there",
            evidence=f"{f.evidence}; every use of {what} in the compiled files is behind an "
            "#if that is false for this pass, or in code only such uses reach (static "
            "reading)"))
    return out


def build_reach(root: Path, walk: Walk, target: ScanTarget, max_bytes: int) -> tuple[Any, str]:
    """What the tree's top-level setup.py compiles for the target (a `reach.Reach`), or None
    for a tree without one or with a top-level CMakeLists.txt (CMake trees keep the
    build-gate reading of their lists); and why a setup.py that is there was not read ("")."""
    paths = [rel for rel, _kind in walk.files]

    def read(rel: str) -> str | None:
        text = read_source(root, rel, max_bytes)
        return text if isinstance(text, str) else None

    system = build_system(root)
    if system is not None and system.compiles_cmake_targets:
        # A CMake project (perhaps with a setup.py as a second way in): its lists and their
        # gates decide what is compiled, as before.
        return None, ""
    try:
        top = [e.name for e in os.scandir(root) if e.is_file()]
    except OSError:
        top = []
    nothing = builds_nothing(top, read)
    if nothing:
        # A pure-Python build: the tree's C/C++ is compiled at run time or not at all, never
        # by its build, so none of it is "assumed compiled".
        return Reach(None, none_compiled=nothing), ""
    setup, why = read_setup(paths, read, platform=target.platform, archs=target.archs)
    if why:
        why = (f"not read as Python: {why}; what it builds is unknown, so every C/C++ file "
               "was checked (fix: make `python setup.py --help` run, or scan with a "
               "CMakeLists.txt)")
    if setup is None:
        return None, why
    return compute_reach(setup, paths, read), why


def _model_reach(root: Path, walk: Walk, model: TreeModel, static: Any,
                 max_bytes: int) -> Any:
    """The `reach.Reach` of the configured build: its sources and what they include. The
    static reading of a setup.py (`static`) keeps its rules and its packages."""
    def read(rel: str) -> str | None:
        text = read_source(root, rel, max_bytes)
        return text if isinstance(text, str) else None

    setup = static.setup if static is not None and buildsystems.get(model.system).runs_setup_py \
        else None
    return from_model(model, [rel for rel, _kind in walk.files], read, setup)


def _model_line(model: TreeModel) -> str:
    """The `truth` line's part that says the build decided what is compiled."""
    system = buildsystems.get(model.system)
    what = f"build ({system.model_source}, {plural(len(model.targets), system.target_noun)}"
    if model.jit:
        what += f"; {plural(len(model.jit), 'run-time compile site')}"
    if not model.targets and model.env_reads:
        # An extension behind an environment switch (`PROJECT_CUDA_EXT=1`): say which
        # variables could turn one on, so the user can scan that configuration.
        names = ", ".join(dict.fromkeys(f"{r.name} ({r.where})" for r in model.env_reads[:4]))
        what += f"; nothing is compiled as run, and the build reads {names}"
    return what + ")"


def build_system(root: Path) -> BuildSystem | None:
    """How the tree is built: the registry's one decision (buildsystems.detect), which the
    scan's reading of the tree (`build_reach`) and `recipe init` share."""
    return buildsystems.detect(root)


def _preload(kinds: set[FileKind]) -> None:
    """Import the C++ checks (and build the C++ parser) once here, before the pool starts:
    where workers are forked they inherit them instead of each importing tree-sitter, its
    grammar and the rule tables again (about a fifth of a static scan of a 300-file tree).
    The CMake and Python checks come with this module's own imports."""
    if "cxx" in kinds:
        from flashbuild.scanning import checks_cxx  # noqa: PLC0415  # cycle
        cxx.parse("", "<preload>")
        del checks_cxx


def _header_facts(args: tuple[str, str, int]) -> tuple[str, Any]:
    """What one C++ file defines (with conditions) and includes (`ppgraph.scan_header`)."""
    root, rel, max_bytes = args
    text = read_source(Path(root), rel, max_bytes)
    if not isinstance(text, str) or "#" not in text:
        return rel, ([], [])
    return rel, scan_header(rel, text)


def _work(root: Path, files: Sequence[tuple[str, FileKind]], target: ScanTarget,  # noqa: PLR0917
          opts: ScanOptions, reach: Any, headers: Sequence[tuple[str, Any]]
          ) -> list[tuple[str, str, FileKind, ScanTarget, int, Any]]:
    """The check jobs, each C++ file with the object-like macros its included headers define
    (`ppgraph`): the preprocessor state along the include graph."""
    dirs = list(reach.include_dirs) if reach is not None else []
    graph = graph_from(headers, dirs)
    out = []
    for rel, kind in files:
        defs = graph.inherited(rel) if kind == "cxx" else None
        out.append((str(root), rel, kind, target, opts.max_file_bytes,
                    as_wire(defs) if defs else None))
    return out


def _reachable_files(files: Sequence[tuple[str, FileKind]], reach: Any,
                     model: TreeModel | None = None,
                     jit: Callable[[], Sequence[JitSite]] = tuple,
                     ) -> tuple[list[tuple[str, FileKind]], list[Skipped]]:
    """The files the build compiles, includes or ships; the rest as one note per folder.
    Code no build compiles for the target can hold nothing that breaks that build. `jit`
    gives the tree's run-time compile sites, asked once something is left out."""
    kept: list[tuple[str, FileKind]] = []
    left: dict[tuple[str, str], int] = {}
    not_compiled = ""
    cmake_build = model is not None and buildsystems.get(model.system).compiles_cmake_targets
    for rel, kind in files:
        if kind == "cxx" and reach.complete and not reach.covers(rel):
            not_compiled = not_compiled or _not_compiled_reason(reach, model, jit())
            why = not_compiled
        elif kind == "python" and not reach.shipped(rel):
            why = "Python outside the packages setup.py installs"
        elif kind == "cmake" and not cmake_build:
            why = "CMake file of a tree that setup.py builds"
        else:
            kept.append((rel, kind))
            continue
        top = rel.split("/")[0] if "/" in rel else "."
        left[(top, why)] = left.get((top, why), 0) + 1
    notes = [Skipped(top, f"{plural(n, 'file')}: {why}; not checked")
             for (top, why), n in sorted(left.items())]
    return kept, notes


def _not_compiled_reason(reach: Any, model: TreeModel | None, jit: Sequence[JitSite]) -> str:
    """Why a C/C++ file the build does not reach is left out, and where the tree compiles
    kernels at run time when it does (those are compiled for the GPU they run on)."""
    if model is not None:
        why = (f"C/C++ not compiled by this configuration ({model.via}), nor included by "
               "what is")
    elif reach.none_compiled:
        why = f"C/C++ the tree's build never compiles ({reach.none_compiled})"
    else:
        why = "C/C++ not compiled for the target by setup.py, nor included by what is"
    if jit:
        first = jit[0]
        why += (f"; the tree compiles kernels at run time ({first.where} {first.how}"
                + (f" and {len(jit) - 1} more" if len(jit) > 1 else "")
                + "): those are compiled at run time, for the GPU it runs on")
    return why


def _separable(root: Path, model: TreeModel | None) -> str:
    """Why the build links device code across units: its units' flags when configured, else
    its build files (source/separable.py); '' when it does not."""
    if model is not None:
        found = separable.from_units(u for t in model.targets for u in t.sources)
        if found or not buildsystems.get(model.system).compiles_cmake_targets:
            return found  # CMake's property is not among a unit's flags: read the files too

    def read(rel: str) -> str | None:
        if not (root / rel).resolve().is_relative_to(root.resolve()):
            return None  # a symlink out of the tree: not the build's file to read
        text = read_source(root, rel, ScanOptions().max_file_bytes)
        return text if isinstance(text, str) else None

    system = buildsystems.get(model.system) if model is not None else build_system(root)
    return separable.from_tree(system, ".", read) if system is not None else ""


def combine(root: Path, reports: Sequence[FileReport], target: ScanTarget,
            reach: Any = None, model: TreeModel | None = None,
            ) -> tuple[list[Finding], tuple[KernelCount, ...]]:
    """The tree-wide pass: per-file findings, filtered and completed with what only the whole
    tree shows (and, with `model`, what the configured build says); and the kernels the
    compiled files define, per arch (the report's verdict line)."""
    from flashbuild.scanning.checks_cxx import instantiation_findings  # noqa: PLC0415  # cycle
    tree = TreeFacts(
        gates=build_gates(reports), defines=tree_defines(reports) | _build_defines(reach, model),
        paths=frozenset(r.path for r in reports),
        dlsym=any(r.facts.get("dlsym") for r in reports), reach=reach,
        exported={name: r.path for r in reports for name in r.facts.get("exported", ())},
        libraries={name: (kind, gates) for r in reports
                   for name, kind, gates in r.facts.get("libraries", ())}, model=model,
        standards=standards(reports, reach, model))
    out: list[Finding] = []
    for report in reports:
        for finding in report.findings:
            kept = _apply_tree_facts(finding, tree, target)
            if kept is not None:
                out.append(kept)
    out = _self_written_libraries(root, out)
    out = math_constants_with_torch(out, reports,
                                    reach.include_dirs if reach is not None else ())
    out.extend(instantiation_findings(root, reports, target, _separable(root, model)))
    out.extend(placeholder_findings(reports, target, _units_of(reach),
                                    lambda path: _compiled(tree, path, target)))
    kernels = kernel_counts(reports, target, lambda path: _compiled(tree, path, target))
    out = major_checks_guarding(out)

    def read(rel: str) -> str | None:
        text = read_source(root, rel, 1 << 24)
        return text if isinstance(text, str) else None

    def compiled(path: str) -> bool:
        return _compiled(tree, path, target)

    out.extend(cstdint_findings(reports, target, compiled, read,
                                reach.include_dirs if reach is not None else ()))
    out.extend(library_header_findings(
        root, reports, compiled, read, reach, model,
        machine_include_dirs(target.platform, os.environ), wheel_include_dirs()))
    if target.platform == "windows":
        out.extend(_package_dll_directory(root, reports, tree, target, out))
    if reach is not None and reach.setup is not None:
        from flashbuild.scanning.checks_setup import setup_findings  # noqa: PLC0415  # cycle

        out.extend(setup_findings(root, reach, target))
    return out, kernels


def _build_defines(reach: Any, model: TreeModel | None) -> frozenset[str]:
    """The macros the build defines for its units (`-DX`, `define_macros`), by name: the
    configured build's, or the static reading of setup.py's."""
    names: set[str] = set()
    if model is not None:
        for target in model.targets:
            for unit in target.sources:
                names.update(d.split("=")[0] for d in unit.defines)
                names.update(m[1] for f in unit.flags if (m := _DEFINE_FLAG.match(f)))
    setup = reach.setup if reach is not None else None
    if setup is not None:
        for ext in setup.extensions:
            names.update(d.split("=")[0] for d in ext.define_macros)
            names.update(m[1] for f in (*ext.cxx_flags, *ext.nvcc_flags)
                         if (m := _DEFINE_FLAG.match(f)))
    return frozenset(names)


#: `-DNAME`, `/DNAME=1`.
_DEFINE_FLAG = re.compile(r"^[-/]D(\w+)")


def _compiled(tree: TreeFacts, path: str, target: ScanTarget) -> bool:
    """Whether the build files compile `path` for the target (a file no build file names,
    e.g. a header, is assumed compiled; a setup.py tree's walk holds only what it reaches)."""
    verdict = tree.gates.compiled_for(path, target)
    return verdict is None or verdict.compiled


def _units_of(reach: Any) -> dict[str, set[str]] | None:
    """File → the compiled units that include it, when the build's units are known (FB154's
    "every kernel of a unit"); None reads the tree as one unit."""
    if reach is None or not reach.compiled:
        return None
    return includers_of(reach)


def _self_written_libraries(root: Path, findings: list[Finding]) -> list[Finding]:
    """FB182 on a `.so` the tree writes itself at run time is a note: a module that runs nvcc
    with `-o …/kernel.so` and the code that loads that file agree on its name, and Windows
    loads a DLL by its path whatever its suffix (DeepGEMM's JIT cache). Only the names written
    in a file that starts nvcc itself count (`find_jit`); cpp_extension's `load` names its
    output with the platform's suffix."""
    hits = [f for f in findings if f.rule == "FB182" and isinstance(f.facts, LibraryNameFacts)]
    if not hits:
        return findings
    from flashbuild.source.treemodel import find_jit  # noqa: PLC0415  # start-up

    writers = {site.where.rpartition(":")[0]: site.where for site in
               find_jit(root, sorted({f.path for f in hits})) if site.how == "nvcc"}
    written = {_base_name(f.facts.literal): writers[f.path] for f in hits
               if f.path in writers and isinstance(f.facts, LibraryNameFacts)}
    out: list[Finding] = []
    for f in findings:
        base = _base_name(f.facts.literal) if f in hits and \
            isinstance(f.facts, LibraryNameFacts) else ""
        out.append(replace(
            f, severity=Severity.NOTE,
            message=f"{f.message} (the tree writes `{base}` itself: nvcc at "
            f"{written[base]}; Windows loads a DLL by its path, whatever its suffix)")
            if base and base in written else f)
    return out


def _base_name(literal: str) -> str:
    return literal.replace("\\", "/").rpartition("/")[2]


@dataclass(frozen=True)
class TreeFacts:
    gates: Any
    defines: frozenset[str]
    paths: frozenset[str]
    dlsym: bool
    reach: Any = None
    """`reach.Reach` for a setup.py tree, else None."""
    exported: Mapping[str, str] = field(default_factory=dict)
    """Function names some file declares with an export macro → that file."""
    libraries: Mapping[str, tuple[str, Any]] = field(default_factory=dict)
    """CMake library targets (shared libraries and Python modules) → (kind, their gates)."""
    model: TreeModel | None = None
    """What the configured build compiles, when it was asked."""
    standards: tuple[Standard, ...] = ()
    """The C++ standards the build asks for (`checks_lang.standards`)."""

    def library_gate(self, name: str, target: ScanTarget) -> str | None:
        """The gate that keeps library `name` out of the target's build, if the build files
        define it and one of its gates is false for the target; else None."""
        if self.model is not None and buildsystems.get(self.model.system).compiles_cmake_targets:
            # The configured build knows which targets this configuration defines.
            if name in self.libraries and not any(t.name == name
                                                  for t in self.model.targets):
                return "not defined by this configuration (CMake File API)"
            return None
        hit = self.libraries.get(name)
        if hit is None:
            return None
        for gate in hit[1]:
            if gate.holds(target.platform, target.archs) is False:
                return str(gate.text)
        return None


def _apply_tree_facts(  # noqa: PLR0911, PLR0912 - one return per kind of tree fact
        finding: Finding, tree: TreeFacts, target: ScanTarget) -> Finding | None:
    """Drop or complete findings with what the rest of the tree says."""
    needs = needs_of(finding.facts)
    if needs is TreeCheck.COMPILED_FOR_TARGET and tree.reach is not None:
        why = tree.reach.reachable.get(finding.path)
        if why is None and tree.reach.complete:
            return None
        if tree.reach.via and why is not None:
            told = why if tree.reach.via in why else f"{why} ({tree.reach.via})"
            return replace(finding, evidence=f"{finding.evidence}; {told}", truth=Truth.BUILD)
        return replace(finding, evidence=f"{finding.evidence}; {why or 'setup.py lists it'}")
    if needs is TreeCheck.COMPILED_FOR_TARGET:
        verdict = tree.gates.compiled_for(finding.path, target)
        if verdict is not None and not verdict.compiled:
            return None
        why = verdict.why if verdict is not None else "no build file lists it (assumed compiled)"
        return replace(finding, evidence=f"{finding.evidence}; {why}")
    if needs is TreeCheck.NO_NOMINMAX and "NOMINMAX" in tree.defines:
        return None
    if needs is TreeCheck.NO_MATH_DEFINES and "_USE_MATH_DEFINES" in tree.defines:
        return None
    if needs is TreeCheck.CXX_STANDARD_BELOW_20 and isinstance(finding.facts,
                                                               DesignatedInitFacts):
        return below_cxx20(finding, finding.facts.language, tree.standards)
    if needs is TreeCheck.LIBRARY_BUILT and isinstance(finding.facts, LibraryNameFacts):
        return _library_not_built(finding, finding.facts.literal, tree, target)
    if needs is TreeCheck.PLUGIN_SOURCE and isinstance(finding.facts, PluginExportFacts) \
            and tree.model is not None and \
            buildsystems.get(tree.model.system).compiles_cmake_targets:
        return _plugin_by_build(finding, finding.facts.symbol, tree, tree.model)
    if needs is TreeCheck.PLUGIN_SOURCE and isinstance(finding.facts, PluginExportFacts):
        shared = tree.gates.shared_library(finding.path)
        if not tree.dlsym or shared is None:
            return None
        verdict = tree.gates.compiled_for(finding.path, target)
        if verdict is not None and not verdict.compiled:
            return None  # the plugin is not built for this target
        declared = tree.exported.get(finding.facts.symbol)
        if declared is not None:
            return None  # declared with an export macro (a header's): exported already
        return replace(finding, evidence=f"{finding.evidence} ({shared})")
    if needs is TreeCheck.NO_SIBLING_MODULE and isinstance(finding.facts, ExtensionImportFacts):
        package = finding.path.rpartition("/")[0]
        module = finding.facts.module
        prefix = f"{package}/{module}" if package else module
        if f"{prefix}.py" in tree.paths or f"{prefix}/__init__.py" in tree.paths:
            return None
    return finding


def _plugin_by_build(finding: Finding, symbol: str, tree: TreeFacts,
                     model: TreeModel) -> Finding | None:
    """A plugin's missing export (FB102), decided by the configured build: reported only when
    a shared library this configuration builds compiles the file."""
    plugin = next((t for t in model.targets if t.kind == "plugin" and
                   any(u.path == finding.path for u in t.sources)), None)
    if not tree.dlsym or plugin is None or \
            tree.exported.get(symbol) is not None:
        return None
    return replace(finding, evidence=f"{finding.evidence} (shared library `{plugin.name}`, "
                   f"{plugin.defined_at}: CMake File API)", truth=Truth.BUILD)


def _library_not_built(finding: Finding, literal: str, tree: TreeFacts,
                       target: ScanTarget) -> Finding:
    """A hard-coded `libX.so` whose CMake target X this configuration does not build (its
    gate is false for the target) breaks nothing here: a note, not an error."""
    stem = literal.replace("\\", "/").rpartition("/")[2]
    stem = stem.removesuffix(".so")
    gate = tree.library_gate(stem, target) or (
        tree.library_gate(stem.removeprefix("lib"), target) if stem.startswith("lib")
        else None)
    by_build = tree.model is not None and \
        buildsystems.get(tree.model.system).compiles_cmake_targets
    if gate is None:
        return finding
    if by_build:
        return replace(finding, severity=Severity.NOTE, truth=Truth.BUILD,
                       message=f"{finding.message} (this configuration does not build the "
                       f"library, for {target.label})",
                       evidence=f"{finding.evidence}; its CMake target is {gate}")
    return replace(finding, severity=Severity.NOTE,
                   message=f"{finding.message} (the build makes this library only when "
                   f"`{gate}`, not for {target.label})",
                   evidence=f"{finding.evidence}; its CMake target is gated by `{gate}`")


def _package_dll_directory(root: Path, reports: Sequence[FileReport], tree: TreeFacts,
                           target: ScanTarget, found: Sequence[Finding]) -> list[Finding]:
    """FB181 for a package whose modules import an extension module the CMake build makes
    (`from pkg import mod`, `mod` a `pybind11_add_module` target, no `mod.py`), when the
    package's `__init__.py` registers no DLL folder."""
    out: list[Finding] = []
    flagged = {f.path for f in found if f.rule == "FB181"}
    for report in reports:
        for package, module, line in report.facts.get("package_imports", ()):
            init = f"{package}/__init__.py"
            hit = tree.libraries.get(module)
            if hit is None or hit[0] != "module" or init in flagged or \
                    init not in tree.paths or tree.library_gate(module, target) or \
                    f"{package}/{module}.py" in tree.paths or \
                    f"{package}/{module}/__init__.py" in tree.paths:
                continue
            text = read_source(root, init, 1 << 22)
            if not isinstance(text, str) or "add_dll_directory" in text:
                continue
            flagged.add(init)
            out.append(Finding(
                rule="FB181", category=Category.PYTHON_PACKAGING, path=init, line=1, col=1,
                severity=Severity.WARNING,
                message=f"`{package}` holds `{module}`, an extension module the CMake build "
                "makes, and never registers DLL folders: on Windows its import fails with "
                "'DLL load failed' unless the CUDA DLLs happen to be loaded already",
                evidence=f"{report.path}:{line} imports {package}.{module}; no {module}.py, "
                f"and no os.add_dll_directory in {init}",
                snippet="", fix=Fix(manual="the install step of `flashbuild build` adds a "
                                    "loader shim to this __init__.py; without flashbuild, "
                                    "call os.add_dll_directory for the CUDA runtime's folder "
                                    "before the first import of the module",
                                    step=LOADER_SHIM),
                facts=ExtensionImportFacts(module=module)))
    return out
