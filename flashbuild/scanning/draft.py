"""`flashbuild recipe init`: draft a recipe from a scan.

Every finding whose fix proposes a step (`Fix.step`, made by the check: `proposals.py`)
becomes a `[[patch]]` step, merged per kind (one `explicit-instantiations` step for all files,
one `dynamic-loading` step, one `macro-edit` per edited condition, one `exclude-sources` per
arch, one `insert-block` per over-budget traits struct), with `when` conditions for the
platform/arch the finding is about, suffix included. Each step is then
planned on the tree with the transform itself, so the drafted `expect` counts are what the
transform finds today (upstream drift later is an error, not a silent no-op). Every finding
that needs a person becomes a commented `# TODO:` block with its evidence.

Traits for a new arch cannot be decided by a transform (tile sizes are a person's choice):
when the budget that the target would use is too big, the FB170 check derives a
specialisation for the target from the primary template, with the shared-memory member set to
the target's limit rounded down to whole KB and a `static_assert`, marked `REVIEW` in the
recipe. A struct that is not a primary template gets a TODO instead.

The build side (`draft_build`) is read from the tree too: CMake module/shared-library targets
(tree-sitter-cmake, the scan's parse) become `[build]` and `[[artifact]]`, the package whose
`__init__.py` imports the module `[install]`, and the module's `m.def` names (tree-sitter-cuda,
the transforms' parse) `[verify] exports`; what it cannot decide is a `# TODO: [table]`.
When introspection runs (the default of `recipe init`; `--static` turns it off), those tables
are then checked against the configured build and corrected from it (draft_check.py): targets
this configuration defines, the tree's arch variable, `[install]`, exports only from the
preprocessed bindings, no `[[build.env]]` the setup.py rejects.
"""

from __future__ import annotations

import ast
import dataclasses
import errno
import itertools
import json
import os
import posixpath
import re
import shutil
import tempfile
import textwrap
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal

from flashbuild import buildsystems, platforms
from flashbuild.console import Column, render_table, ui
from flashbuild.detect.cuda import find_toolkits, python_site_packages
from flashbuild.errors import PatchError, TreeError, UsageError
from flashbuild.outputs import refuse_over_tree, write_no_follow
from flashbuild.proc import ProcessRunner
from flashbuild.recipes.load import recipe_from_data
from flashbuild.scanning import draft_skbuild
from flashbuild.scanning.checks_cmake import ADD_LIBRARY
from flashbuild.scanning.checks_cmake import _commands as cmake_commands
from flashbuild.scanning.checks_cmake import _parser as cmake_parser
from flashbuild.scanning.findings import ScanOptions, make_target
from flashbuild.scanning.plugin_home import PluginHome, find_homes
from flashbuild.scanning.proposals import ChooseArchList, nvcc_append_flags
from flashbuild.scanning.report import resolve_platform
from flashbuild.scanning.rules import RULES
from flashbuild.scanning.scan import read_source, scan_tree, walk_tree
from flashbuild.source import cxx, separable
from flashbuild.source.cmake_archlists import literal_arch_lists
from flashbuild.source.nvccflags import read_arch_flags
from flashbuild.source.ppgraph import build_graph
from flashbuild.source.setup_record import demanded_variable, exception_fix, toolkit_value
from flashbuild.source.setuppy import parse_python, read_setup
from flashbuild.source.treemodel import CPP_EXTENSION_LOAD, find_jit

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from tree_sitter import Node

    from flashbuild.arch import ArchSpec, BuildTarget
    from flashbuild.buildsystems import BackendName
    from flashbuild.recipes.model import Recipe
    from flashbuild.scanning.findings import Finding, ScanResult, ScanTarget
    from flashbuild.scanning.proposals import Proposal
    from flashbuild.source.setup_record import EnvRead, RaisedError
    from flashbuild.source.treemodel import Introspection, JitSite, TreeModel

    PlanSteps = Callable[[Recipe, Path, str, tuple[str, ...], str],
                         Iterator[tuple[dict[str, str], int, tuple[str, ...]]]]
    """Per patch step of the recipe in order: (path → new text, sites counted, one line per
    site the transform refuses); raises the step's PatchError or TreeError when it refuses the
    whole step (patching.plan.plan_steps). The last argument: why the configured build links
    device code across units ('' when unknown or not)."""


@dataclass
class DraftStep:
    id: str
    description: str
    transform: str
    params: dict[str, Any]
    when: dict[str, Any]
    comment: str = ""
    expect: dict[str, int] = field(default_factory=dict)
    changes: dict[str, str] = field(default_factory=dict)
    """What planning the step writes (tree-relative path → text), for the compile check."""
    checked: str = ""
    """The compile check's verdict for this step (`--compile-check`), rendered above it."""
    refused: tuple[str, ...] = ()
    """Sites the transform refuses when the step is planned (`path:line: why`): left as they
    are, rendered above the step."""


@dataclass
class Draft:
    name: str
    source_path: str
    target: ScanTarget
    steps: list[DraftStep] = field(default_factory=list)
    todos: list[Finding] = field(default_factory=list)
    handled: list[tuple[Finding, str]] = field(default_factory=list)
    build: BuildDraft | None = None
    """The build side, read from the tree (`draft_build`); None renders no build tables."""
    refused: list[tuple[Finding, str]] = field(default_factory=list)
    """Findings a transform could edit but a draft must not (it would harm): why not."""
    check_summary: str = ""
    """Which code steps were compile-checked (or why none was)."""
    unplanned: list[tuple[str, str]] = field(default_factory=list)
    """Edits a drafted step could not make when planned (step id, the transform's paragraph):
    left out of the draft and rendered as TODOs, so one refused site does not kill it."""
    introspection: str = ""
    """Which source of truth the build tables rest on (the configured build, or why static
    reading was used)."""
    drafted: list[tuple[Finding, tuple[str, ...]]] = field(default_factory=list)
    """Findings a drafted step fixes: the ids of the steps their kind made (the outcome
    table `recipe init` prints)."""
    separable: str = ""
    """Why the configured build links device code across units (its units' `-rdc=true`),
    '' when it does not or was not configured: the transforms then keep device symbols
    another unit references (source/separable.py)."""


def draft_recipe(result: ScanResult, *, name: str, source_path: str) -> Draft:
    """Turn each finding's fix into the draft (no expect counts yet: see `fill_expect`).

    A fix's `step` (`proposals`) says what it becomes; the proposals of one kind are merged
    by that kind (one step per transform and file set, per arch, per condition), kinds in
    their `rank` order. A finding whose fix proposes nothing is a TODO, after all others."""
    d = Draft(name=name, source_path=source_path, target=result.target)
    groups: dict[tuple[int, type[Proposal]], list[tuple[Finding, Proposal]]] = defaultdict(list)
    todos: list[Finding] = []
    for f in result.findings:
        if any(f.path.startswith(f"{v}/") for v in result.vendored):
            # Scanned with --include-vendored: fixes belong upstream, never in a draft.
            d.refused.append((f, "vendored code (fixes belong upstream)"))
        elif f.fix.step is None and f.handled:
            # The scan's decision (scan.mark_handled, proposals.handled_by_build): the build
            # does it, no step. A NoStepNeeded proposal says the same through its kind below.
            d.handled.append((f, f.handled))
        elif f.fix.step is None:
            todos.append(f)
        else:
            groups[(f.fix.step.order, type(f.fix.step))].append((f, f.fix.step))
    for (_order, kind), members in sorted(groups.items(), key=lambda g: g[0][0]):
        drafted = kind.draft(members)
        ids = tuple(dict.fromkeys(_add_step(d.steps, DraftStep(
            id=s.id, description=s.description, transform=s.transform, params=dict(s.params),
            when=dict(s.when), comment=s.comment)) for s in drafted.steps))
        d.refused += drafted.refused
        d.handled += drafted.handled
        d.todos += drafted.todos
        decided = {id(f) for f, _why in [*drafted.refused, *drafted.handled]}
        decided |= {id(f) for f in drafted.todos}
        d.drafted += [(f, ids) for f, _p in members if id(f) not in decided and ids]
    d.todos += todos
    return d


def _add_step(steps: list[DraftStep], step: DraftStep) -> str:
    """Add `step` to the draft's `steps` under an id no other step has, and return that id. A
    step that makes the same edit as one already there (same transform, params and `when`)
    is that step; one whose id is taken by another edit (the same line in two files of one
    basename, `set(CMAKE_CXX_STANDARD 17)` in two CMakeLists.txt) gets `-2`, `-3`, … after
    it, so neither edit is lost and each finding names the step that makes its own."""
    def same(other: DraftStep) -> bool:
        return (other.transform, other.params, other.when) == \
            (step.transform, step.params, step.when)

    taken = {s.id: s for s in steps}
    candidate, n = step.id, 1
    while candidate in taken:
        if same(taken[candidate]):
            return candidate
        n += 1
        candidate = f"{step.id}-{n}"
    steps.append(dataclasses.replace(step, id=candidate))
    return candidate


# --- the build side: [build], [[artifact]], [install], [verify] ----------------------------

#: CMake commands that make a Python extension module from their first argument (pybind11's
#: and nanobind's CMake helpers; FindPython's `Python_add_library(NAME MODULE …)`).
MODULE_COMMANDS = frozenset({"pybind11_add_module", "nanobind_add_module"})
PYTHON_ADD_LIBRARY = frozenset({"python_add_library", "python3_add_library"})
OUTPUT_PROPERTIES = ("LIBRARY_OUTPUT_DIRECTORY", "RUNTIME_OUTPUT_DIRECTORY")
#: `PYBIND11_MODULE(name, m)` / `NB_MODULE(name, m)`: the C++ side of a module.
MODULE_MACROS = frozenset({"PYBIND11_MODULE", "NB_MODULE"})
_CACHE_REF = re.compile(r"^\$\{(\w+)\}$")


@dataclass(frozen=True, kw_only=True)
class DraftArtifact:
    name: str
    kind: Literal["module", "plugin"]
    target: str
    where: str
    """`file:line` of the CMake command that creates the target."""


@dataclass(frozen=True, kw_only=True)
class BuildTodo:
    """Something about the build side the draft could not decide."""

    table: str
    what: str
    evidence: str
    fix: str


@dataclass(kw_only=True)
class BuildDraft:
    """`[build]`, `[[artifact]]`, `[install]` and `[verify]` as read from the tree."""

    cmake_source: str | None = None
    artifacts: list[DraftArtifact] = field(default_factory=list)
    output_dir_var: str | None = None
    exclude_var: str | None = None
    homes: list[PluginHome] = field(default_factory=list)
    """The package folder each shared-library target belongs to, where one was found."""
    package: str | None = None
    package_dir: str | None = None
    jit: list[str] = field(default_factory=list)
    """`[build] jit`: the tree's files whose run-time load() the build makes ahead of time."""
    jit_note: str = ""
    """Why (the comment above `jit`)."""
    top_level: list[str] = field(default_factory=list)
    """`[install] top_level`: extension modules installed by their own name (no package,
    or beside it)."""
    exports: list[str] = field(default_factory=list)
    backend: BackendName = "cmake"
    env: list[tuple[dict[str, Any], dict[str, str], str]] = field(default_factory=list)
    """`[[build.env]]` tables: (when, set, comment)."""
    options: list[tuple[dict[str, str], str]] = field(default_factory=list)
    """`[[build.options]]` tables: (define, comment)."""
    notes: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    """Comments rendered above each table (`build`, `artifact`, `install`, `verify`)."""
    todos: list[BuildTodo] = field(default_factory=list)


@dataclass(frozen=True)
class _CMakeCommand:
    file: str
    line: int
    name: str
    args: tuple[str, ...]


def _read(root: Path, rel: str) -> str | None:
    text = read_source(root, rel, ScanOptions().max_file_bytes)
    return text if isinstance(text, str) else None


def _cmake_commands(root: Path, rel: str) -> list[_CMakeCommand]:
    """Every command of a CMakeLists.txt and of the folders it `add_subdirectory`s (CMake's
    own order), on the scan's tree-sitter-cmake parse."""
    out: list[_CMakeCommand] = []
    seen: set[str] = set()
    stack: list[str] = []

    def visit(path: str) -> None:
        seen.add(path)
        stack.append(path)
        try:
            walk(path)
        finally:
            stack.pop()

    def walk(path: str) -> None:
        text = _read(root, path)
        if text is None:
            return
        tree = cmake_parser().parse(text.encode("utf-8"))
        folder = PurePosixPath(path).parent
        for cmd in cmake_commands(tree.root_node, ()):
            line = cmd.node.start_point[0] + 1
            out.append(_CMakeCommand(path, line, cmd.name, cmd.args))
            if cmd.name == "add_subdirectory" and cmd.args and "${" not in cmd.args[0]:
                sub = posixpath.normpath((folder / cmd.args[0] / "CMakeLists.txt").as_posix())
                if sub.startswith("../") or posixpath.isabs(sub):
                    continue  # a folder outside the tree: not the tree's to draft
                if sub in seen and sub not in stack:
                    # Reached again by another branch: llama-cpp-python adds llama.cpp's
                    # tools/mtmd itself, and llama.cpp adds it under the opposite condition.
                    # Each `if` decides at configure time (the File API reply says which
                    # ran); its commands are read once.
                    continue
                if sub in stack:
                    # A folder that adds itself or a folder above it: CMake refuses it too
                    # ("binary directory ... is already used"); without this check the walk
                    # recursed forever (issue 22).
                    raise TreeError(
                        f"{path} adds a folder that is already part of the build",
                        evidence=f"{path}:{line}: add_subdirectory({cmd.args[0]}) reaches "
                        f"{sub} again (a loop)",
                        fix="remove that add_subdirectory line (CMake stops on it as well: "
                        "\"binary directory ... is already used to build a source directory\")")
                visit(sub)

    visit(posixpath.normpath(rel))
    return out


def _top_cmakelists(root: Path, cmake_files: Sequence[str]) -> str | None:
    """The shallowest CMakeLists.txt that calls project(): the one `cmake -S` is given."""
    for rel in sorted((f for f in cmake_files if PurePosixPath(f).name == "CMakeLists.txt"),
                      key=lambda f: (f.count("/"), f)):
        text = _read(root, rel)
        if text is not None and re.search(r"^\s*project\s*\(", text, re.MULTILINE | re.I):
            return rel
    return None


def _artifacts(commands: Sequence[_CMakeCommand], b: BuildDraft) -> None:
    modules: list[DraftArtifact] = []
    plugins: list[DraftArtifact] = []
    for cmd in commands:
        if not cmd.args:
            continue
        name, rest, where = cmd.args[0], cmd.args[1:], f"{cmd.file}:{cmd.line}"
        kind: Literal["module", "plugin"] | None = None
        if cmd.name in MODULE_COMMANDS or (cmd.name in PYTHON_ADD_LIBRARY and "MODULE" in rest):
            kind = "module"
        elif cmd.name in ADD_LIBRARY and rest[:1] in (("SHARED",), ("MODULE",)):
            kind = "plugin"
        if kind is None:
            continue
        if "${" in name or "$<" in name:
            b.todos.append(BuildTodo(
                table="artifact", what=f"a {kind} target whose name is computed: `{name}`",
                evidence=f"{where}: {cmd.name}({' '.join(cmd.args)})",
                fix="add an [[artifact]] with the target's real name (and its kind)"))
            continue
        art = DraftArtifact(name=name, kind=kind, target=name, where=where)
        (modules if kind == "module" else plugins).append(art)
    b.artifacts = modules + plugins


def _cache_variables(commands: Sequence[_CMakeCommand]) -> set[str]:
    return {c.args[0] for c in commands if c.args and (
        (c.name == "set" and "CACHE" in c.args[1:]) or c.name == "option")}


def _output_dirs(commands: Sequence[_CMakeCommand], b: BuildDraft) -> None:
    """`output_dir_var`: the one cache variable every artifact target's LIBRARY/RUNTIME
    output folder is set to. A folder set to anything else is a TODO: flashbuild could not
    redirect it (it finds the binaries in the build folder only if they land there)."""
    cache = _cache_variables(commands)
    values = _output_settings(commands, {a.target for a in b.artifacts})
    if not values:
        return
    written = {h.library: h for h in b.homes if h.via == "output"}
    if written and all(t in written for uses in values.values() for t, _ in uses):
        # A shared library written into its package's folder (a ctypes-loaded library): the
        # build writes it into its copy of the tree, inside the build folder, and finds it
        # there; nothing to redirect.
        b.notes["build"] += [f"output folder: {h.how}; flashbuild finds it there (in its "
                             "copy of the tree inside the build folder)" for h in written.values()]
        return
    names = {m[1] for v in values if (m := _CACHE_REF.match(v)) and m[1] in cache}
    if len(names) == 1 and len(values) == 1:
        (b.output_dir_var,) = names
        (uses,) = values.values()
        b.notes["build"].append(
            f"output_dir_var: the CMakeLists writes {', '.join(sorted({t for t, _ in uses}))} "
            f"to ${{{b.output_dir_var}}}, a cache variable ({uses[0][1]})")
        return
    evidence = "; ".join(f"{', '.join(sorted({t for t, _ in uses}))} -> {value} "
                         f"({uses[0][1]})" for value, uses in sorted(values.items()))
    b.todos.append(BuildTodo(
        table="build", what="the CMakeLists sets its own output folders, not through one "
        "cache variable: flashbuild cannot point them at its build folder",
        evidence=evidence,
        fix="give the folder a cache variable (`set(MY_OUTPUT_DIR … CACHE PATH …)`, used by "
        "LIBRARY_OUTPUT_DIRECTORY and RUNTIME_OUTPUT_DIRECTORY) and name it in [build] "
        "output_dir_var; without it flashbuild takes the newest matching binary in the build "
        "folder"))


def _output_settings(commands: Sequence[_CMakeCommand],
                     targets: set[str]) -> dict[str, list[tuple[str, str]]]:
    """Output-folder values the artifact targets get: value -> [(target, file:line)]."""
    values: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for cmd in commands:
        where = f"{cmd.file}:{cmd.line}"
        if cmd.name == "set" and len(cmd.args) > 1 and cmd.args[0] in (
                "CMAKE_LIBRARY_OUTPUT_DIRECTORY", "CMAKE_RUNTIME_OUTPUT_DIRECTORY"):
            for tgt in sorted(targets):
                values[cmd.args[1]].append((tgt, where))
        elif cmd.name == "set_target_properties" and "PROPERTIES" in cmd.args:
            at = cmd.args.index("PROPERTIES")
            props = cmd.args[at + 1:]
            for key, value in zip(props[0::2], props[1::2], strict=False):
                if key in OUTPUT_PROPERTIES:
                    for tgt in cmd.args[:at]:
                        if tgt in targets:
                            values[value].append((tgt, where))
        elif cmd.name == "set_property" and cmd.args[:1] == ("TARGET",) and \
                "PROPERTY" in cmd.args:
            at = cmd.args.index("PROPERTY")
            if len(cmd.args) > at + 2 and cmd.args[at + 1] in OUTPUT_PROPERTIES:
                for tgt in cmd.args[1:at]:
                    if tgt in targets:
                        values[cmd.args[at + 2]].append((tgt, where))
    return values


def _exclude_var(commands: Sequence[_CMakeCommand], b: BuildDraft) -> None:
    """`exclude_var`: a cache variable the CMakeLists removes from its source lists
    (`list(REMOVE_ITEM SOURCES ${EXCLUDE})`)."""
    cache = _cache_variables(commands)
    found: dict[str, str] = {}
    for cmd in commands:
        if cmd.name == "list" and cmd.args[:1] == ("REMOVE_ITEM",):
            for arg in cmd.args[2:]:
                m = _CACHE_REF.match(arg)
                if m and m[1] in cache:
                    found.setdefault(m[1], f"{cmd.file}:{cmd.line}")
    if len(found) == 1:
        ((name, where),) = found.items()
        b.exclude_var = name
        b.notes["build"].append(
            f"exclude_var: list(REMOVE_ITEM … ${{{name}}}) takes sources out of the build "
            f"({where})")
        if b.cmake_source not in (None, "."):
            b.notes["build"].append(
                f"REVIEW: flashbuild fills {name} with paths relative to the tree; this "
                f"CMakeLists is in {b.cmake_source}/ (check which paths it expects)")
    elif len(found) > 1:
        b.todos.append(BuildTodo(
            table="build", what="several cache variables take sources out of the build",
            evidence="; ".join(f"{n} ({w})" for n, w in sorted(found.items())),
            fix="name the one exclude-sources steps should fill in [build] exclude_var"))


def _module_imports(tree: ast.Module, package: str) -> dict[str, int]:
    """Modules of this package (dotted name) the `__init__.py` imports (name -> line):
    `from . import _C`, `from ._C import f`, `from pkg import _C`, `import pkg._C`,
    `importlib.import_module("._C", __name__)`."""
    out: dict[str, int] = {}
    prefix = package + "."
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                names = [node.module.split(".")[0]] if node.module else \
                    [a.name for a in node.names]
            elif node.level == 0 and node.module == package:
                names = [a.name for a in node.names]
            elif node.level == 0 and (node.module or "").startswith(prefix):
                names = [(node.module or "").removeprefix(prefix).split(".")[0]]
        elif isinstance(node, ast.Import):
            names = [a.name.removeprefix(prefix).split(".")[0] for a in node.names
                     if a.name.startswith(prefix)]
        elif isinstance(node, ast.Call) and node.args and isinstance(
                node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            func = node.func
            callee = func.attr if isinstance(func, ast.Attribute) else \
                func.id if isinstance(func, ast.Name) else ""
            target = node.args[0].value
            if callee == "import_module":
                if target.startswith(".") and not target.startswith(".."):
                    names = [target[1:].split(".")[0]]
                elif target.startswith(prefix):
                    names = [target.removeprefix(prefix).split(".")[0]]
        for name in names:
            out.setdefault(name, getattr(node, "lineno", 0))
    return out


def _bound_names(tree: ast.Module, module: str) -> set[str] | None:
    """Top-level names the `__init__.py` binds; None when it star-imports the module (then
    every name of the module is the package's)."""
    bound: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            if any(a.name == "*" for a in node.names) and (node.module or "").split(".")[-1] \
                    == module:
                return None
            bound.update(a.asname or a.name for a in node.names)
    return bound


def _package_of(init: str, python_files: set[str]) -> tuple[str, str]:
    """(dotted package name, its folder) of an `__init__.py`; parents that are packages too
    make the name dotted."""
    folder = PurePosixPath(init).parent
    parts = [folder.name]
    parent = folder.parent
    while parent.name and (parent / "__init__.py").as_posix() in python_files:
        parts.insert(0, parent.name)
        parent = parent.parent
    return ".".join(parts), folder.as_posix()


def _install(root: Path, python_files: Sequence[str], b: BuildDraft) -> ast.Module | None:
    """`[install]`: the package whose `__init__.py` imports a module artifact (or, with no
    module target in CMake, the one package that imports an extension-looking `_name`)."""
    files = set(python_files)
    modules = {a.name for a in b.artifacts if a.kind == "module"}
    hits: list[tuple[str, str, str, int, ast.Module]] = []  # module, package, dir, line, tree
    guesses: list[tuple[str, str, str, int, ast.Module]] = []
    for rel in sorted(f for f in python_files if PurePosixPath(f).name == "__init__.py"):
        text = _read(root, rel)
        if text is None:
            continue
        try:
            tree = parse_python(text, rel)
        except SyntaxError:
            continue
        package, folder = _package_of(rel, files)
        for name, line in _module_imports(tree, package).items():
            entry = (name, package, folder, line, tree)
            if name in modules:
                hits.append(entry)
            elif name.startswith("_") and not name.startswith("__") and \
                    f"{folder}/{name}.py" not in files and \
                    not (root / folder / name).is_dir():
                guesses.append(entry)
    chosen = hits or (guesses if not modules else [])
    if not chosen and _install_without_init(root, python_files, b, sorted(modules)):
        return None
    if not chosen:
        what = (f"no package's __init__.py imports the module {', '.join(sorted(modules))}"
                if modules else "no CMake module target, and no package imports an "
                "extension module")
        b.todos.append(BuildTodo(
            table="install", what=what, evidence="searched every __init__.py of the tree",
            fix="add [install] package = \"NAME\" and package_dir = \"path/to/NAME\" (the "
            "folder the binaries install into)"))
        return None
    name, package, folder, line, tree = chosen[0]
    b.package, b.package_dir = package, folder
    b.notes["install"].append(f"{folder}/__init__.py:{line} imports `{name}`")
    if not hits:
        b.notes["install"].append(
            f"REVIEW: no CMake target builds `{name}` (another build system does, e.g. "
            "setup.py); the package is where this build's binaries will go")
    others = {(p, f) for _, p, f, _, _ in chosen[1:]} - {(package, folder)}
    if others:
        b.notes["install"].append(
            "REVIEW: other packages import it too: " + ", ".join(sorted(f for _, f in others)))
    return tree


def install_beside_importer(root: Path, python_files: Sequence[str], b: BuildDraft,
                           modules: Sequence[str]) -> None:
    """A module the build installs at the top of site-packages (CMake's `install(TARGETS m
    DESTINATION .)`) that a package's `__init__.py` imports by its own name (torchmcubes:
    `import torchmcubes_module as mc`): the package gets the loader shim and the manifest,
    and the module is `top_level`, as setup.py's top-level extensions are."""
    files = set(python_files)
    for rel in sorted(f for f in python_files if PurePosixPath(f).name == "__init__.py"):
        text = _read(root, rel) or ""
        used = [m for m in modules if "." not in m and re.search(
            rf"^\s*(?:import|from)\s+{re.escape(m)}\b", text, re.M)]
        if not used:
            continue
        package, folder = _package_of(rel, files)
        if "." in package:
            continue
        b.package, b.package_dir = package, folder
        b.top_level = list(dict.fromkeys([*b.top_level, *used]))
        b.todos = [t for t in b.todos if t.table != "install"]
        b.notes["install"].append(
            f"REVIEW: `{used[0]}` is a top-level module; {rel} imports it by that name: the "
            f"loader shim and the manifest go into `{package}`")
        return


def install_from_imports(root: Path, python_files: Sequence[str], b: BuildDraft,
                          modules: Sequence[str]) -> None:
    """The package the tree's Python imports a module from (`from pkg import mod`, `import
    pkg.mod`), when that package is a folder of the tree: the binaries install there."""
    files = set(python_files)
    counts: Counter[str] = Counter()
    where: dict[str, str] = {}
    for rel in python_files:
        text = _read(root, rel)
        if text is None or not any(m in text for m in modules):
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [f"{node.module}.{a.name}" for a in node.names]
                names.append(node.module)
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for dotted in names:
                package, _, leaf = dotted.rpartition(".")
                if leaf in modules and package:
                    counts[package] += 1
                    where.setdefault(package, f"{rel}:{getattr(node, 'lineno', 0)}")
    for package, _n in counts.most_common():
        folder = package.replace(".", "/")
        if f"{folder}/__init__.py" in files:
            b.package, b.package_dir = package, folder
            b.todos = [t for t in b.todos if t.table != "install"]
            b.notes["install"].append(
                f"the tree's Python imports the module from `{package}` ({where[package]}, "
                f"{counts[package]} import(s)); its __init__.py does not import it")
            return


def _install_without_init(root: Path, python_files: Sequence[str], b: BuildDraft,
                          modules: Sequence[str]) -> bool:
    """`[install]` when no `__init__.py` imports a module artifact: shared libraries only go
    to the package they belong to; modules to the package the tree's Python imports them
    from (`from pkg import mod`), else they are top-level modules. False: none of these."""
    if not modules and b.homes:
        _plugin_install(b)
        return True
    if modules:
        install_from_imports(root, python_files, b, modules)
        if b.package is not None:
            return True
    return _cmake_top_level(b)


def _plugin_install(b: BuildDraft) -> None:
    """`[install]` for shared libraries a package loads itself: the package CMake writes or
    installs the first one into, or the one that loads it with ctypes (plugin_home.py)."""
    home = b.homes[0]
    b.package, b.package_dir = home.package, home.folder
    b.notes["install"].append(f"{home.how}: {home.library} installs into the package "
                              f"`{home.package}`")
    if home.loaded and home.via != "ctypes":
        b.notes["install"].append(f"and {home.loaded}")
    others = sorted({h.folder for h in b.homes[1:]} - {home.folder})
    if others:
        b.notes["install"].append("REVIEW: other libraries belong to other packages ("
                                  + ", ".join(others) + "); all install into this one")
    homeless = [a.name for a in b.artifacts if a.kind == "plugin"
                and a.name not in {h.library for h in b.homes}]
    if homeless:
        b.notes["install"].append(f"REVIEW: nothing says where {', '.join(homeless)} "
                                  "belong(s); installed into this package too")


def _cmake_top_level(b: BuildDraft) -> bool:
    """Module targets that no package imports, and nothing else to install: extension
    modules imported by their own name (`import fastops`), installed at the top of
    site-packages as a setup.py or scikit-build tree would. A `_name` module belongs to a
    package whose `__init__.py` should import it (the TODO says so instead)."""
    modules = [a.name for a in b.artifacts if a.kind == "module"]
    if not modules or len(modules) != len(b.artifacts) or \
            any(m.startswith("_") for m in modules):
        return False
    b.top_level = modules
    b.notes["install"].append(
        f"REVIEW: no package imports {', '.join(modules)}: installed as top-level "
        f"module(s) (`import {modules[0]}`), at the top of site-packages")
    return True


def plugin_exports_note(b: BuildDraft) -> None:
    """Say why a draft whose binaries are all shared libraries has no `[verify] exports`."""
    plugins = [a.name for a in b.artifacts if a.kind == "plugin"]
    if plugins and len(plugins) == len(b.artifacts):
        ctypes = any(h.loaded for h in b.homes)
        b.notes["verify"].append(
            f"no [verify] exports: {', '.join(plugins)} "
            f"{'is a shared library' if len(plugins) == 1 else 'are shared libraries'} the "
            f"package loads itself{' (ctypes)' if ctypes else ''}, not an extension module, "
            "so there is no Python name to look up; verify checks the SASS and the "
            "dependencies (name kernels in [verify] kernels to look for them)")


def _exports(root: Path, cxx_files: Sequence[str], b: BuildDraft,
             init_tree: ast.Module | None) -> None:
    """`[verify] exports`: the `m.def("name", …)` names of each module's PYBIND11_MODULE /
    NB_MODULE body, on the transforms' tree-sitter-cuda parse. verify looks names up on the
    package: one the `__init__.py` does not bind is written `module.name`."""
    modules = [a.name for a in b.artifacts if a.kind == "module"]
    if not modules:
        plugin_exports_note(b)
        return
    found: dict[str, tuple[str, list[str]]] = {}
    for rel in cxx_files:
        text = _read(root, rel)
        if text is None or not any(m in text for m in MODULE_MACROS):
            continue
        src = cxx.parse(text, rel)
        for node in cxx.walk(src.root):
            if node.type != "function_definition":
                continue
            decl = node.child_by_field_name("declarator")
            fn = decl.child_by_field_name("declarator") if decl is not None else None
            params = decl.child_by_field_name("parameters") if decl is not None else None
            if fn is None or params is None or src.node_text(fn) not in MODULE_MACROS:
                continue
            args = [src.node_text(p).strip() for p in params.named_children]
            if len(args) != 2 or args[0] not in modules:
                continue
            body = node.child_by_field_name("body")
            names = _def_names(src, body, args[1]) if body is not None else []
            found.setdefault(args[0], (f"{rel}:{src.line_of(node.start_byte)}", names))
    for module in modules:
        if module not in found:
            b.todos.append(BuildTodo(
                table="verify", what=f"no PYBIND11_MODULE({module}, …) / NB_MODULE({module}, "
                "…) in the C++ sources: the module's exports are unknown",
                evidence=f"searched {len(cxx_files)} C++/CUDA files",
                fix="list the names the module must export in [verify] exports"))
            continue
        where, names = found[module]
        bound = _bound_names(init_tree, module) if init_tree is not None else set()
        qualified = [n if bound is None or n in bound else f"{module}.{n}" for n in names]
        b.exports += [n for n in qualified if n not in b.exports]
        b.notes["verify"].append(f"exports: the m.def names of {module} ({where})"
                                 + ("; names the package does not bind are looked up on "
                                    "the module" if any("." in n for n in qualified) else ""))


def _def_names(src: cxx.Source, body: Node, var: str) -> list[str]:
    names: list[str] = []
    for call in cxx.walk(body):
        if call.type != "call_expression":
            continue
        fn = call.child_by_field_name("function")
        args = call.child_by_field_name("arguments")
        if fn is None or args is None or fn.type != "field_expression":
            continue
        obj, field_ = fn.child_by_field_name("argument"), fn.child_by_field_name("field")
        if obj is None or field_ is None or src.node_text(obj) != var or \
                src.node_text(field_) != "def" or not args.named_children:
            continue
        first = args.named_children[0]
        if first.type == "string_literal":
            content = [c for c in first.named_children if c.type == "string_content"]
            name = src.node_text(content[0]) if content else ""
            if name and name not in names:
                names.append(name)
    return names


#: Binaries a tree may ship instead of building them.
_BINARY_SUFFIXES = (".so", ".pyd", ".dll", ".dylib", ".cubin", ".fatbin")


def _no_native_build(root: Path, files: Sequence[tuple[str, str]],
                     by_kind: dict[str, list[str]]) -> BuildTodo:
    """The TODO for a tree with no build flashbuild can drive: no CMake project() and no
    setup.py extension. Say what the tree is instead: one that compiles its kernels at run
    time (cpp_extension.load, NVRTC), one that ships binaries built elsewhere, or one with no
    native code a build could find."""
    nested = _nested_setup_scripts(root, by_kind["python"])
    if nested:
        rel, kind = nested[0]
        folder = posixpath.dirname(rel) or "."
        runs = _mention(root / "setup.py", posixpath.basename(rel))
        return BuildTodo(
            table="build", what=f"setup.py builds no native code itself: another script of "
            f"the tree does ({rel}, {kind})",
            evidence=f"{rel} calls setup() with a torch {kind}"
            + (f"; setup.py names it at line {runs} (it runs that script itself)" if runs
               else "") + (f"; also {', '.join(r for r, _k in nested[1:3])}"
                           if len(nested) > 1 else ""),
            fix=f"build that script's folder as a tree of its own: flashbuild builds the "
            f"setup.py at a tree's top, so copy {rel} to {folder}/setup.py and run `flashbuild "
            f"build {folder} --arch ARCH`; then install the package itself with pip "
            "(`pip install --no-build-isolation .`)")
    jit = find_jit(root, by_kind["python"])
    shipped = sorted(rel for rel, _kind in files if rel.endswith(_BINARY_SUFFIXES)) or sorted(
        p.relative_to(root).as_posix() for p in root.rglob("*")
        if p.suffix in _BINARY_SUFFIXES and p.is_file() and "build" not in p.parts)
    cmake = f"{len(by_kind['cmake'])} CMake file(s), no setup.py extension"
    if jit:
        return BuildTodo(
            table="build", what="the tree builds no native code ahead of time: it compiles "
            "its kernels at run time",
            evidence=f"{cmake}; " + "; ".join(f"{j.how} at {j.where}" for j in jit[:3]),
            fix="nothing for flashbuild to compile: install it with pip and its kernels "
            "compile on first use (with the CUDA toolkit and a host compiler present); to "
            "build them ahead of time the tree needs a CMakeLists.txt or a setup.py extension")
    if shipped:
        return BuildTodo(
            table="build", what="the tree builds no native code: it ships binaries built "
            "elsewhere", evidence=f"{cmake}; shipped: {', '.join(shipped[:4])}",
            fix="nothing for flashbuild to compile: the binaries come with the tree (check "
            "their arch with `flashbuild verify` after a pip install); to build them, get "
            "the project's sources with a CMakeLists.txt or a setup.py extension")
    return BuildTodo(
        table="build", what="no CMakeLists.txt with a project() call and no setup.py "
        "extension: the tree builds no native code flashbuild can find", evidence=cmake,
        fix="add a CMakeLists.txt that builds the module, then [build] and [[artifact]]")


#: A torch extension class a build script names.
_TORCH_EXTENSION_CLASS = re.compile(r"\b(CUDAExtension|CppExtension)\s*\(")


def _nested_setup_scripts(root: Path, python_files: Sequence[str]) -> list[tuple[str, str]]:
    """(path, `CUDAExtension` or `CppExtension`) of the tree's other build scripts: Python
    files below the top whose name starts with `setup` and that call setup() with a torch
    extension (hqq 0.2.8's `hqq/kernels/setup_cuda.py`, which its setup.py runs from
    egg_info), CUDA ones first."""
    found: list[tuple[str, str]] = []
    for rel in python_files:
        name = posixpath.basename(rel)
        if rel == "setup.py" or not name.startswith("setup") or \
                (root / rel).is_symlink() or not (root / rel).is_file():
            continue
        try:
            text = (root / rel).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        kinds = {m[1] for m in _TORCH_EXTENSION_CLASS.finditer(text)}
        if kinds and re.search(r"\bsetup\s*\(", text):
            found.append((rel, "CUDAExtension" if "CUDAExtension" in kinds else "CppExtension"))
    return sorted(found, key=lambda f: (f[1] != "CUDAExtension", f[0]))


def _mention(path: Path, text: str) -> int:
    """The first line of `path` that holds `text` (0 when none does, or it cannot be read)."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return 0
    return next((n for n, line in enumerate(lines, 1) if text in line), 0)


def draft_build(root: Path, d: Draft | None = None, setup: Any = None,
                findings: Sequence[Finding] = ()) -> BuildDraft:
    """Read [build], [[artifact]], [install] and [verify] from the tree's CMake, Python and
    C++ files; what it cannot decide becomes a `BuildTodo`. A tree that setup.py builds
    (`setup`, a `setuppy.SetupPy`) gets the setuptools backend instead."""
    b = BuildDraft()
    walk = walk_tree(root)
    by_kind: dict[str, list[str]] = defaultdict(list)
    for rel, kind in walk.files:
        by_kind[kind].append(rel)
    # scikit-build-core: its pyproject names the CMakeLists and the build (draft_skbuild.py).
    skb = draft_skbuild.settings_of(root)
    if setup is not None and skb is None:
        _setuptools_build(root, setup, findings, by_kind["python"], b)
        return b
    top = _top_cmakelists(root, by_kind["cmake"]) if skb is None else \
        draft_skbuild.top_cmakelists(root, skb)
    if top is None:
        b.todos.append(_no_native_build(root, walk.files, by_kind))
    else:
        folder = PurePosixPath(top).parent.as_posix()
        b.cmake_source = folder
        commands = _cmake_commands(root, top)
        _artifacts(commands, b)
        b.homes = find_homes([a.name for a in b.artifacts if a.kind == "plugin"],
                             commands=commands, python_files=by_kind["python"],
                             read=lambda rel: _read(root, rel), top=top)
        if not b.artifacts:
            b.todos.append(BuildTodo(
                table="artifact", what="no module or shared-library target in the CMake files",
                evidence=f"{top} and its add_subdirectory folders: no pybind11_add_module, "
                "nanobind_add_module, Python_add_library(… MODULE) or (cuda_)add_library(… SHARED|"
                "MODULE)", fix="add an [[artifact]] per binary the build must install"))
        _output_dirs(commands, b)
        _exclude_var(commands, b)
        if d is not None and b.exclude_var is None and any(
                s.transform == "exclude-sources" for s in d.steps):
            b.todos.append(BuildTodo(
                table="build", what="exclude-sources steps, and no cache variable the "
                "CMakeLists removes sources by", evidence=f"no list(REMOVE_ITEM … ${{VAR}}) "
                f"with a cache VAR in {top} and its add_subdirectory folders",
                fix="add one (`set(MY_EXCLUDE \"\" CACHE STRING …)` + `list(REMOVE_ITEM "
                "SOURCES ${MY_EXCLUDE})`) and name it in [build] exclude_var, or give the "
                "exclude-sources steps their `cmake_lists` param"))
    init_tree = _install(root, by_kind["python"], b)
    _exports(root, by_kind["cxx"], b, init_tree)
    if skb is not None:
        draft_skbuild.as_skbuild(b, skb)
    return b


def _setuptools_build(root: Path, setup: Any, findings: Sequence[Finding],
                      python_files: Sequence[str], b: BuildDraft) -> None:
    """`[build] backend = "setuptools"`, the `[[build.env]]` the findings call for, and
    `[install]` from the packages and extension names setup.py declares."""
    b.backend = "setuptools"
    built = setup.built_for_target()
    for ext in setup.extensions:
        b.notes["build"].append(
            f"{setup.path}:{ext.line} `{ext.name or '?'}` ({ext.kind}, {len(ext.sources)} "
            f"source(s)): " + {"yes": "built", "maybe": f"built when {ext.condition}",
                               "no": f"not built for this target ({ext.condition})"}[ext.built])
    flags = nvcc_append_flags(findings)
    if flags:
        # NVCC_APPEND_FLAGS is read by nvcc itself, so setup.py needs no edit.
        b.env.append(({"platform": ["windows"]}, {"NVCC_APPEND_FLAGS": " ".join(flags)},
                      "MSVC flags setup.py does not pass (scan FB200/FB210); nvcc reads "
                      "NVCC_APPEND_FLAGS itself"))
    switches = [name for name, _line in setup.env_switches]
    if any(isinstance(f.fix.env, ChooseArchList) for f in findings):
        arch = [n for n in switches if "ARCH" in n.upper() and n != "TORCH_CUDA_ARCH_LIST"
                and not re.search(r"HIP|ROCM", n.upper())]
        if arch:
            b.env.append(({"platform": ["windows", "linux"]}, {arch[0]: "{arch_numbers}"},
                          f"REVIEW: setup.py builds its gencode list from {arch[0]} "
                          "(format assumed: numbers separated by ';')"))
        else:
            b.todos.append(BuildTodo(
                table="build", what="the gencode list in setup.py is hard-coded: "
                "TORCH_CUDA_ARCH_LIST cannot choose the target",
                evidence="scan FB220", fix="narrow the list in setup.py with a recipe step, "
                "or accept building every listed arch"))
    elif "TORCH_CUDA_ARCH_LIST" in switches or setup.uses_cpp_extension:
        b.env.append(({"platform": ["windows", "linux"]},
                      {"TORCH_CUDA_ARCH_LIST": "{torch_arch_list}"},
                      "torch's cpp_extension (or setup.py itself) reads the arch list"))
    force = [n for n in switches if n.upper().endswith("FORCE_BUILD")]
    if force and setup.downloads:
        b.env.append(({"platform": ["windows", "linux"]}, {force[0]: "TRUE"},
                      f"compile instead of downloading a prebuilt wheel (setup.py:"
                      f"{setup.downloads[0][0]})"))
    _setuptools_install(root, setup, [e.name for e in built if e.name], python_files, b)


def _setuptools_install(root: Path, setup: Any, modules: Sequence[str],
                        python_files: Sequence[str], b: BuildDraft) -> None:
    """`[install]` from the extension names setup.py builds and the packages it declares: the
    package the dotted names live in (or that imports a top-level one), and the top-level
    modules."""
    pdir = dict(setup.package_dir)
    dotted = [m for m in modules if "." in m]
    # A module named without a package (`CUDAExtension("rotary_emb", ...)`): pip installs it
    # at the top of site-packages, beside whatever packages setup.py has.
    b.top_level = [m for m in modules if "." not in m]
    package = ""
    if dotted:
        package = holding_package(dotted)
        b.notes["install"].append(f"extension module(s) {', '.join(dotted[:4])} live in "
                                  f"package `{package}`")
    elif modules:
        tops = sorted({p.split(".")[0] for p in setup.packages})
        for pkg in tops:
            # `package_dir={"": "src"}` (spatial-correlation-sampler's `Correlation_Module`)
            # puts every package under that folder.
            folder = pdir.get(pkg) or (posixpath.join(pdir[""], pkg) if pdir.get("") else
                                       package_folder(pkg, python_files) or pkg)
            users = [f for f in python_files if f.startswith(f"{folder}/")
                     and re.search(rf"^\s*(?:import|from)\s+{re.escape(modules[0])}\b",
                                   _read(root, f) or "", re.M)]
            if users:
                package = pkg
                b.notes["install"].append(
                    f"REVIEW: `{modules[0]}` is a top-level module; {users[0]} imports it: "
                    f"the loader shim and the manifest go into `{pkg}`")
                break
    if b.top_level:
        b.notes["install"].append(
            f"top_level: setup.py builds {', '.join(b.top_level)} with no package, so pip "
            f"installs {'it' if len(b.top_level) == 1 else 'them'} at the top of "
            "site-packages; verify looks `"
            f"{b.top_level[0]}.NAME` exports up on that module")
    if not package and b.top_level:
        others = list(dict.fromkeys(p.split(".")[0] for p in setup.packages))
        b.notes["install"].append(
            "no package holds or imports it: no loader shim (no GPU check at import); the "
            "wheel keeps the manifest in its .dist-info"
            + (f"; setup.py's packages {', '.join(others[:4])} install beside it as they are"
               if others else ""))
        return
    if package:
        top = package.split(".")[0]
        base = pdir.get(top, pdir.get("", ""))
        rest = package.split(".")[1:] if top in pdir else package.split(".")
        b.package = package
        b.package_dir = str(PurePosixPath(base, *rest)) if base else "/".join(
            package.split("."))
        if f"{b.package_dir}/__init__.py" not in python_files:
            # Packages found under `src/` by pyproject's [tool.setuptools.packages.find]
            # (natten), which setup.py itself does not say.
            b.package_dir = package_folder(package, python_files) or b.package_dir
    else:
        tops = list(dict.fromkeys(p.split(".")[0] for p in setup.packages))
        b.todos.append(BuildTodo(
            table="install", what="no package for the extension modules of setup.py",
            evidence=f"modules: {', '.join(modules) or 'none named'}; top-level packages: "
            f"{', '.join(tops[:6]) or 'none'}"
            + (f" and {len(tops) - 6} more" if len(tops) > 6 else ""),
            fix="add [install] package = \"NAME\" and package_dir = \"path/to/NAME\""))


def holding_package(dotted: Sequence[str]) -> str:
    """The package that holds every one of the dotted module names: `pkg.a._a` and `pkg.b._b`
    install into `pkg` (its manifest names `a/_a…so` and `b/_b…so`), not into the first
    one's `pkg.a` (OpenPCDet's seven extensions under `pcdet.ops.*`). Names with no package
    in common keep the first one's."""
    parents = [m.rsplit(".", 1)[0].split(".") for m in dotted]
    common = [p[0] for p in itertools.takewhile(lambda p: len(set(p)) == 1,
                                                 zip(*parents, strict=False))]
    return ".".join(common) or ".".join(parents[0])


def package_folder(package: str, python_files: Sequence[str]) -> str | None:
    """The tree folder holding package `package` (dotted): `pkg/__init__.py` at the top, else
    the shallowest `…/pkg/__init__.py` (a `src/` layout); None when there is none."""
    tail = package.replace(".", "/") + "/__init__.py"
    found = sorted((f for f in python_files if f == tail or f.endswith("/" + tail)),
                   key=lambda f: (f.count("/"), f))
    return found[0].removesuffix("/__init__.py") if found else None


# --- planning the drafted steps: exact expect counts ---------------------------------------

class _StepFailed(Exception):
    def __init__(self, index: int, error: PatchError | TreeError) -> None:
        super().__init__(error.what)
        self.index, self.error = index, error


def fill_expect(d: Draft, root: Path, plan: PlanSteps) -> None:
    """Plan every step on the tree with the transform itself (in memory, nothing written) and
    record the sites it finds as the step's `expect`. A step the transform refuses (a site it
    cannot edit safely) loses the file it names, or is left out when it names none, and the
    refusal becomes a TODO: the user never wrote that step, so "fix step X" (exit 5) would
    send them to fix flashbuild's draft (issue 22). Each round drops a file or a step."""
    while True:
        try:
            _fill_expect(d, root, plan)
            break
        except _StepFailed as failed:
            step = d.steps[failed.index]
            error = failed.error
            path = error.details.get("path")
            files = step.params.get("files")
            d.unplanned.append((step.id, error.paragraph()))
            if isinstance(files, list) and path in files and len(files) > 1:
                step.params = {**step.params, "files": [f for f in files if f != path]}
            else:
                del d.steps[failed.index]
    # A step whose every site the transform refuses changes nothing: it would only carry a
    # REVIEW comment for an edit that never happens. It leaves, and says why; it changed
    # nothing, so the steps after it plan the same without it.
    for drafted in [s for s in d.steps if s.refused and not s.changes
                    and s.expect.get("sites") == len(s.refused)]:
        d.steps.remove(drafted)
        d.unplanned += [(drafted.id, f"refused {why}") for why in drafted.refused]


def _fill_expect(d: Draft, root: Path, plan: PlanSteps) -> None:
    recipe = to_recipe(d)
    planned = plan(recipe, root, d.target.platform, tuple(a.sm for a in d.target.archs),
                   d.separable)
    for index, drafted in enumerate(d.steps):
        try:
            changes, sites, refused = next(planned)
        except (PatchError, TreeError) as exc:
            raise _StepFailed(index, exc) from exc
        drafted.expect = {"sites": sites}
        drafted.changes = changes
        drafted.refused = refused


# --- rendering ----------------------------------------------------------------------------

#: Characters TOML allows in no string or comment unescaped (file names may hold them).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        if "\n" in value and "'''" not in value and not _CONTROL.search(value):
            return "'''" + ("\n" if value.startswith("\n") else "") + value + "'''"
        # JSON escapes every control character but DEL, which TOML also refuses raw.
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    raise TypeError(type(value))


def _key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else _toml(name)


def _safe_comment(line: str) -> str:
    """A comment line that stays one TOML comment whatever a file name in it holds: a
    newline in a name would end the comment and start TOML of the tree's choosing."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", line.replace("\n", "\\n"))


def _plain(value: Any) -> Any:
    """`value` as TOML loads it: tuples become arrays, tables plain dicts."""
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def draft_data(d: Draft) -> dict[str, Any]:
    """The recipe the draft is, as data: exactly what TOML loads from `render(d)` (a test
    keeps the two equal), without its comments. The tables follow `render`'s choices."""
    data: dict[str, Any] = {
        "recipe": {"name": d.name, "description": f"drafted from a scan for {d.target.label}"},
        "source": {"path": d.source_path},
    }
    if d.steps:
        data["patch"] = [
            {"id": s.id, "description": s.description, "transform": s.transform,
             "when": _plain(s.when), **({"expect": _plain(s.expect)} if s.expect else {}),
             "params": _plain(s.params)} for s in d.steps]
    if d.build is not None:
        data |= _build_data(d.build)
    return data


def _build_data(b: BuildDraft) -> dict[str, Any]:
    """`[build]`, `[[artifact]]`, `[install]` and `[verify]` as `_render_build` writes them."""
    data: dict[str, Any] = {}
    system = buildsystems.get(b.backend)
    build: dict[str, Any] = {}
    options = [{"define": _plain(define)} for define, _c in b.options]
    if system.configured_by_pyproject:
        build["backend"] = b.backend
    else:
        if system.steered_by_environment:
            build["backend"] = b.backend
            build |= {"jit": list(b.jit)} if b.jit else {}
            if b.env:
                build["env"] = [{"when": _plain(w), "set": _plain(v)} for w, v, _c in b.env]
        if b.cmake_source is not None:
            build |= {"cmake_source": b.cmake_source,
                      "targets": [a.target for a in b.artifacts]}
            build |= {k: v for k, v in (("output_dir_var", b.output_dir_var),
                                        ("exclude_var", b.exclude_var)) if v}
        if b.artifacts:
            data["artifact"] = [{"name": a.name, "kind": a.kind, "target": a.target}
                                for a in b.artifacts]
    if options and (system.configured_by_pyproject or b.cmake_source is not None):
        build["options"] = options
    if build:
        data["build"] = build
    if (b.package is not None and b.package_dir is not None) or b.top_level:
        install: dict[str, Any] = {}
        if b.package is not None and b.package_dir is not None:
            install |= {"package": b.package, "package_dir": b.package_dir}
        if b.top_level:
            install["top_level"] = _plain(b.top_level)
        data["install"] = install
    if b.exports:
        data["verify"] = {"exports": list(b.exports)}
    return data


def render(d: Draft) -> str:
    """The draft as TOML with its comments and TODOs: run once per `recipe init`, at the end
    (the steps before read the typed draft: `to_recipe`)."""
    t = d.target
    out = [
        f"# Drafted by `flashbuild recipe init` for {t.label}.",
        "# Review every step (REVIEW marks a decision flashbuild made for you) and every TODO,",
        "# then: flashbuild recipe check <this file>; flashbuild patch --recipe <this file> "
        "--dry-run;",
        "# flashbuild build --recipe <this file>; flashbuild verify <[install] package_dir>",
        "",
        "[recipe]",
        f"name = {_toml(d.name)}",
        f"description = {_toml(f'drafted from a scan for {t.label}')}",
        "",
        "[source]",
        f"path = {_toml(d.source_path)}",
        "",
    ]
    if d.introspection:
        out += [f"# {d.introspection}", ""]
    if d.check_summary:
        out += [f"# {line}" for line in d.check_summary.splitlines()] + [""]
    for s in d.steps:
        out += _render_step(s)
    if d.build is not None:
        out += _render_build(d.build)
    for step_id, paragraph in d.unplanned:
        out += [f"# TODO: the drafted step `{step_id}` could not make this edit, so it was "
                "left out of the step:", *(f"#   {line}" for line in
                                          textwrap.wrap(_safe_comment(paragraph), 96)), ""]
    if d.refused:
        out.append("# Not drafted (the edit would harm):")
        out += [f"#   {f.rule} {f.path}:{f.line}: {why}" for f, why in d.refused]
        out.append("")
    if d.handled:
        out.append("# Handled without a step:")
        out += [f"#   {f.rule} {f.path}:{f.line}: {why}" for f, why in d.handled]
        out.append("")
    for f in d.todos:
        out += [
            f"# TODO: {f.rule} ({RULES[f.rule].name}, {f.severity.value}) "
            f"{f.path}:{f.line}:{f.col}",
            f"#   {f.message}",
            f"#   evidence: {f.evidence}",
            f"#   source:   {f.snippet}",
            f"#   fix:      {f.fix.describe()}",
            "",
        ]
    for todo in d.build.todos if d.build is not None else ():
        out += [f"# TODO: [{todo.table}] {todo.what}", f"#   evidence: {todo.evidence}",
                f"#   fix:      {todo.fix}", ""]
    return "\n".join(_safe_comment(line) if line.startswith("#") else line
                     for line in out).rstrip() + "\n"


def shown_todos(d: Draft) -> list[tuple[str, str, str, str]]:
    """The build tables' TODOs as `render` shows them — (table, what, evidence, fix), each one
    line with control characters escaped — for `build TREE`, which lists them and stops on
    one it cannot build without (pipeline/choose.py), without reading the comments back."""
    def shown(text: str) -> str:
        return _safe_comment(text).strip()

    return [(t.table, shown(t.what), shown(t.evidence), shown(t.fix))
            for t in (d.build.todos if d.build is not None else ())]


def _render_step(s: DraftStep) -> list[str]:
    out = [f"# {line}" for line in s.comment.splitlines()]
    if s.checked:
        out.append(f"# {s.checked}")
    for why in s.refused:
        out += textwrap.wrap(f"REFUSED (left as it is): {why}", 96,
                             initial_indent="# ", subsequent_indent="#   ")
    out += ["[[patch]]", f"id = {_toml(s.id)}", f"description = {_toml(s.description)}",
            f"transform = {_toml(s.transform)}", f"when = {_toml(s.when)}"]
    if s.expect:
        out.append(f"expect = {_toml(s.expect)}")
    out.append("[patch.params]")
    out += [f"{k} = {_toml(v)}" for k, v in s.params.items()]
    out.append("")
    return out


def _render_build(b: BuildDraft) -> list[str]:
    out: list[str] = []

    def notes(table: str) -> None:
        out.extend(f"# {line}" for line in b.notes.get(table, ()))

    if buildsystems.get(b.backend).configured_by_pyproject:
        out += draft_skbuild.render_build(b, _toml)
        return out + _render_install_verify(b)
    if buildsystems.get(b.backend).steered_by_environment:
        notes("build")
        out += ["[build]", f"backend = {_toml(b.backend)}"]
        if b.jit:
            out += [f"# {b.jit_note}", f"jit = {_toml(b.jit)}"]
        out.append("")
        for when, values, comment in b.env:
            out += [f"# {comment}", "[[build.env]]", f"when = {_toml(when)}",
                    f"set = {_toml(values)}", ""]
    if b.cmake_source is not None:
        notes("build")
        out += ["[build]", f"cmake_source = {_toml(b.cmake_source)}",
                f"targets = {_toml([a.target for a in b.artifacts])}"]
        if b.output_dir_var:
            out.append(f"output_dir_var = {_toml(b.output_dir_var)}")
        if b.exclude_var:
            out.append(f"exclude_var = {_toml(b.exclude_var)}")
        out.append("")
        for define, comment in b.options:
            out += [f"# {comment}", "[[build.options]]", f"define = {_toml(define)}", ""]
    for a in b.artifacts:
        out += [f"# {a.where}", "[[artifact]]", f"name = {_toml(a.name)}",
                f"kind = {_toml(a.kind)}", f"target = {_toml(a.target)}", ""]
    return out + _render_install_verify(b)


def _render_install_verify(b: BuildDraft) -> list[str]:
    out: list[str] = []

    def notes(table: str) -> None:
        out.extend(f"# {line}" for line in b.notes.get(table, ()))

    if (b.package is not None and b.package_dir is not None) or b.top_level:
        notes("install")
        out.append("[install]")
        if b.package is not None and b.package_dir is not None:
            out += [f"package = {_toml(b.package)}", f"package_dir = {_toml(b.package_dir)}"]
        if b.top_level:
            out.append(f"top_level = {_toml(b.top_level)}")
        out.append("")
    if b.exports:
        notes("verify")
        out += ["# kernels / dynamic_smem: name the kernels verify must find in the binaries",
                "[verify]", "exports = ["]
        out += [f"  {_toml(n)}," for n in b.exports]
        out += ["]", ""]
    elif b.notes.get("verify"):
        notes("verify")
        out.append("")
    return out


_CODE_STEPS = ("macro-edit", "insert-block")


def compile_check(d: Draft, root: Path, result: ScanResult) -> None:
    """Compile-check the drafted code steps with the toolkit doctor would choose (see
    `compilecheck`); each step's verdict, and a summary, go into the draft."""
    from flashbuild.scanning.compilecheck import StepEdit, check_steps  # noqa: PLC0415  # start-up
    code = [s for s in d.steps if s.transform in _CODE_STEPS]
    if not code:
        d.check_summary = "compile check: no code step to check"
        return
    runner = ProcessRunner()
    search = find_toolkits(os.environ, runner, platforms.current(),
                           site_packages=python_site_packages(), targets=d.target.archs)
    toolkit = search.chosen
    if toolkit is None or toolkit.nvcc is None:
        d.check_summary = "compile check: not run (no CUDA toolkit with nvcc found)"
        for s in code:
            s.checked = "not compile-checked: no nvcc"
        return
    walk = walk_tree(root)
    cxx_files = [rel for rel, kind in walk.files if kind == "cxx"]
    graph = build_graph(cxx_files, lambda rel: _read(root, rel))
    includers: dict[str, list[str]] = defaultdict(list)
    for src, incs in graph.includes.items():
        for inc in incs:
            includers[inc].append(src)
    dirs: list[str] = []
    if result.setup is not None:
        for ext in result.setup.built_for_target():
            dirs.extend(x for x in ext.include_dirs if x not in dirs)
    arch = d.target.archs[0]
    verdicts = check_steps(
        root, [StepEdit(s.id, s.transform, s.changes) for s in d.steps],
        nvcc=toolkit.nvcc, arch=arch, runner=runner, includers=includers, include_dirs=dirs)
    label = f"nvcc {toolkit.version or '?'}"
    by_id = {v.step_id: v for v in verdicts}
    for s in code:
        v = by_id.get(s.id)
        s.checked = v.comment(label, arch.sm) if v else "not compile-checked"
    done = [v.step_id for v in verdicts if v.status in ("ok", "fixed")]
    other = [f"{v.step_id} ({v.status})" for v in verdicts if v.status not in ("ok", "fixed")]
    d.check_summary = (f"compile check ({label}, {arch.sm}, host compiler of this machine): "
                       f"checked {', '.join(done) or 'none'}"
                       + (f"; not passed or not checked: {', '.join(other)}" if other else ""))


def run_init(source: Path, *, platform: str | None, arch: str | BuildTarget, output: Path | None,
             as_json: bool, check: bool = False, force: bool = False,
             introspect: Callable[[Recipe, Path, ArchSpec, str], Introspection] | None = None,
             plan: PlanSteps,
             ) -> int:
    """The `recipe init` stage (see `draft_tree`); its exit code."""
    draft_tree(source, platform=platform, arch=arch, output=output, as_json=as_json,
               check=check, force=force, introspect=introspect, plan=plan)
    return 0


def _setup_to_record(root: Path, result: ScanResult, *, recorded: bool) -> Any:
    """The scan's reading of setup.py; where it names no extension, a setup.py that uses
    torch's cpp_extension all the same (`extension_type(…)`, the class chosen by a GPU check
    at run time) when record mode will run it and name them."""
    if result.setup is not None or not recorded:
        return result.setup
    files = [e.name for e in os.scandir(root) if e.is_file()]
    found = read_setup(files, lambda rel: _read(root, rel), platform=result.target.platform,
                       archs=result.target.archs, unnamed=True)[0]
    if found is not None:
        return found
    # A tree whose Python compiles an extension at run time (cpp_extension.load), with no
    # CMake project the draft would build: its setuptools build is recorded too, with those
    # files in `[build] jit` (`_prebuild_jit`).
    walk = walk_tree(root)
    if _top_cmakelists(root, [rel for rel, kind in walk.files if kind == "cmake"]) is not None:
        return None
    loads = package_loads(find_jit(root, [rel for rel, kind in walk.files if kind == "python"]))
    return read_setup(files, lambda rel: _read(root, rel), platform=result.target.platform,
                      archs=result.target.archs, jit=True)[0] if loads else None


def draft_tree(source: Path, *, platform: str | None, arch: str | BuildTarget,
               output: Path | None, as_json: bool, check: bool = False, force: bool = False,
               introspect: Callable[[Recipe, Path, ArchSpec, str], Introspection] | None = None,
               plan: PlanSteps,
               ) -> Draft:
    """Scan, draft, check the build side against the configured build (`introspect`, given
    by the caller: it runs the tree's build scripts; None = static reading only), plan for
    expect counts (`plan`, given by the caller: patching's `plan_steps`, a later stage than
    this one), validate, write; the typed draft, for a caller that reads its TODOs
    (`build TREE`: pipeline/choose.py)."""
    target = make_target(resolve_platform(platform), arch)
    root = source.resolve()
    if output is not None:
        _check_output(output)
        refuse_over_tree(output, root, option="-o", force=force)
    with ui.activity() as stage:  # the scan's stages on stderr: a big tree takes a while
        result = scan_tree(root, target, stage=stage)
    if result.setup_unreadable and not (root / "CMakeLists.txt").is_file():
        # The draft's [build] comes from setup.py: without it, it would be a guess.
        raise TreeError(
            "recipe init cannot read the tree's setup.py, so it cannot draft the build",
            evidence=f"{root / 'setup.py'}: {result.setup_unreadable.split('; what it')[0]}",
            fix="fix setup.py so that Python parses it (`python -c \"import ast; "
            "ast.parse(open('setup.py').read())\"`), make it a regular file inside the tree, "
            "or write the recipe's [build] by hand")
    base = (output.resolve().parent if output is not None else Path.cwd())
    rel = os.path.relpath(root, base).replace(os.sep, "/")
    d = draft_recipe(result, name=re.sub(r"[^a-z0-9-]+", "-", root.name.lower()) or "tree",
                     source_path=rel)
    setup = _setup_to_record(root, result, recorded=introspect is not None)
    d.build = draft_build(root, d, setup, result.findings)
    if introspect is not None:
        _introspect(d, root, target.spec, target.platform, introspect, result.read)
    else:
        d.introspection = "build tables: static reading (recipe init --static executes nothing)"
    from flashbuild.scanning.draft_check import reconcile  # noqa: PLC0415  # cycle

    reconcile(d)
    fill_expect(d, root, plan)
    if check:
        compile_check(d, root, result)
    elif any(s.transform in _CODE_STEPS for s in d.steps):
        d.check_summary = ("the code steps were not compile-checked "
                           "(`recipe init --compile-check` builds each touched unit with nvcc)")
    # The draft must load (a RecipeError here is a flashbuild bug): checked on the typed
    # draft, then rendered once; nothing parses the text back.
    to_recipe(d, output)
    text = render(d)
    if output is not None:
        try:
            write_no_follow(output, text.encode("utf-8"))
        except OSError as exc:
            raise UsageError(f"cannot write the recipe to {output}; nothing was written",
                             evidence=exc.strerror or str(exc),
                             fix="free space on that disk and run again"
                             if exc.errno == errno.ENOSPC
                             else "pass `-o` a file in a folder you can write to") from exc
    if not as_json:
        # Beside the recipe, not in it: on stderr when stdout carries the recipe itself, or a
        # JSON document (`build --json` drafting a tree: seen break the document on an H100).
        render_table(ui.human if output is not None else ui.err,
                     "what the draft makes of the scan's findings", OUTCOME_COLUMNS,
                     outcome_rows(d))
    if as_json:
        ui.emit_json({"ok": True, "output": str(output) if output else None,
                      "steps": [{"id": s.id, "transform": s.transform, "expect": s.expect,
                                 "checked": s.checked} for s in d.steps],
                      "todos": len(d.todos) + len(d.build.todos),
                      "introspection": d.introspection,
                      "build": _build_json(d.build), "recipe": text})
    elif output is None:
        ui.out.print(text, markup=False, highlight=False, soft_wrap=True)
    else:
        ui.say(f"drafted {len(d.steps)} patch step(s), {len(d.build.artifacts)} "
               f"artifact(s) and {len(d.todos) + len(d.build.todos)} TODO(s) into {output}")
    return d


#: The columns of recipe init's outcome table (`outcome_rows`).
OUTCOME_COLUMNS = [Column("rule", key=True), Column("check", key=True),
                   Column("n", key=True, justify="right"), Column("what the draft does")]


def outcome_rows(d: Draft) -> list[list[str]]:
    """What became of the findings, per rule and outcome: a drafted step (its ids), handled by
    a later stage of the build, for you (a TODO in the draft), or not drafted. A
    step left out when it was planned or compile-checked leaves its findings to you. The
    build tables' own TODOs (`[install]`, `[[artifact]]`) close the table."""
    kept = {s.id for s in d.steps}
    outcomes: list[tuple[Finding, str]] = []
    for f, ids in d.drafted:
        still = [i for i in ids if i in kept]
        outcomes.append((f, f"drafted step {', '.join(still)}" if still else
                         "for you (TODO): its drafted step was left out"))
    # The reasons are in the draft's comments ("Handled without a step", "Not drafted"): the
    # table is the overview.
    outcomes += [(f, "handled by build") for f, _why in d.handled]
    outcomes += [(f, "for you (TODO)") for f in d.todos]
    outcomes += [(f, "not drafted (the draft says why)") for f, _why in d.refused]
    counts: dict[tuple[str, str], int] = {}
    for f, what in outcomes:
        counts[(f.rule, what)] = counts.get((f.rule, what), 0) + 1
    rows = [[rule, RULES[rule].name, str(n), what] for (rule, what), n in sorted(counts.items())]
    # What the build tables could not decide: TODOs too, though no finding made them.
    tables: dict[str, int] = {}
    for todo in d.build.todos if d.build is not None else ():
        tables[todo.table] = tables.get(todo.table, 0) + 1
    rows += [[f"[{table}]", "build table", str(n), "for you (TODO)"]
             for table, n in sorted(tables.items())]
    return rows


def _introspect(d: Draft, root: Path, spec: ArchSpec, platform: str,  # noqa: PLR0917
                introspect: Callable[[Recipe, Path, ArchSpec, str], Introspection],
                read: frozenset[str] | None = None) -> None:
    """Ask the configured build (see draft_check.apply_model). For a setup.py, the record runs
    with the drafted environment; if it raises, once more without the drafted [[build.env]]:
    when that passes, those tables are dropped and a TODO quotes the exception."""
    from flashbuild.scanning.draft_check import (  # noqa: PLC0415  # cycle
        apply_model,
        missing_file_todo,
    )

    assert d.build is not None
    if buildsystems.get(d.build.backend).compiles_cmake_targets and d.build.cmake_source is None:
        d.introspection = ("build tables: static reading (nothing to configure: no "
                           "CMakeLists.txt with project() and no setup.py using "
                           "torch.utils.cpp_extension)")
        return
    outcome = _plain_arch_list(d, introspect(to_recipe(d), root, spec, platform), root, spec,
                               platform=platform, introspect=introspect)
    model = outcome.model
    if buildsystems.get(d.build.backend).compiles_cmake_targets and (
            model is None or not any(u.language == "CUDA" for t in model.targets
                                     for u in t.sources)):
        switched = _find_cmake_switch(d, root, spec, platform=platform, introspect=introspect)
        if switched is not None:
            outcome, model = switched, switched.model
    outcome = _toolkit_variable(d, outcome, root, spec, platform=platform,
                                introspect=introspect)
    model = outcome.model
    here = [t for t in d.build.env if platform in t[0].get("platform", [platform])]
    missing = missing_file_todo(model.exception, root) if model is not None and \
        model.exception is not None else None
    if missing is not None:
        # Nothing runs without the file, with or without the drafted environment.
        d.build.todos.append(missing)
    elif model is not None and model.exception is not None and here:
        # The drafted environment could not be confirmed: it is left out, and the TODO says
        # whether it was the cause (a run without it passes) or not (the setup.py raises
        # either way, e.g. for a missing submodule).
        shown = ", ".join(f"{k}={v}" for _w, values, _c in here for k, v in values.items())
        d.build.env = [t for t in d.build.env if t not in here]
        retry = introspect(to_recipe(d), root, spec, platform)
        caused = retry.model is not None and retry.model.exception is None
        d.build.todos.append(BuildTodo(
            table="build",
            what=f"setup.py raises with the drafted environment ({shown}); that "
            "[[build.env]] was left out" if caused else
            "setup.py raises when run as the build runs it, with or without the drafted "
            f"environment ({shown}), which was left out because it could not be checked",
            evidence=str(model.exception),
            fix=exception_fix(str(model.exception)) or (
                "set only values this setup.py accepts (read the check at the line quoted)"
                if caused else "fix what the exception says (e.g. check out the submodules), "
                "then run recipe init again")))
        if retry.model is not None:
            outcome, model = retry, retry.model
    steered = model is not None and buildsystems.get(model.system).steered_by_environment
    if model is not None and steered and model.exception is None and \
            not any(u.language == "CUDA" for t in model.targets for u in t.sources):
        model = _find_switch(d, model, root, spec, platform=platform,
                             introspect=introspect) or \
            _prebuild_jit(d, model, root, spec, platform=platform, introspect=introspect) or model
    elif model is not None and steered and model.exception is None:
        model = _steer_arch(d, model, root, spec, platform=platform,
                            introspect=introspect) or model
    elif model is not None and model.arch_variable is None and \
            buildsystems.get(model.system).compiles_cmake_targets:
        model = _steer_literal_archs(d, model, root, spec, platform=platform,
                                     introspect=introspect) or model
    if model is None:
        d.introspection = (f"build tables: static reading (introspection fell back: "
                           f"{outcome.fallback})")
        ui.say_wrapped(f"introspection fell back to static reading: {outcome.fallback}")
        return
    d.introspection = f"build tables: checked against the configured build ({model.via})"
    d.separable = separable.from_units(u for t in model.targets for u in t.sources)
    walk = walk_tree(root)
    apply_model(d, model, root, [rel for rel, kind in walk.files if kind == "python"])
    if read is not None:
        unread = {u.path for t in model.targets for u in t.sources} - read - \
            set(model.missing_sources)
        if unread:
            _merge_findings(d, scan_tree(root, d.target, model=model), sorted(unread),
                            read=read)


def _merge_findings(d: Draft, result: ScanResult, unread: Sequence[str], *,
                    read: frozenset[str]) -> None:
    """What the scan with the configured build's model finds that the first scan, which read
    the build files statically, could not: a source the build compiles through a glob or a
    computed list (Deformable-DETR's `glob(…/*.cu)`), and what only it includes. Their steps
    and TODOs join the draft; what the first scan drafted stays. The second scan reads the
    whole tree, so its findings in the files the first one `read` are left out: that scan's
    word on them stands (with the build's defines another site of the same file can show,
    which would be a second, overlapping edit). A finding whose step would merge into one
    the draft already has (the same id, other params) is a TODO rather than an edit left
    out."""
    seen = {(f.rule, f.path, f.line) for f in [
        *d.todos, *(f for f, _w in d.handled), *(f for f, _w in d.refused),
        *(f for f, _ids in d.drafted)]}
    new = [f for f in result.findings
           if f.path not in read and (f.rule, f.path, f.line) not in seen]
    if not new:
        return
    extra = draft_recipe(dataclasses.replace(result, findings=tuple(new)), name=d.name,
                         source_path=d.source_path)
    have = {s.id: s for s in d.steps}
    clashing = {s.id for s in extra.steps if s.id in have and have[s.id].params != s.params}
    d.steps += [s for s in extra.steps if s.id not in have]
    d.todos += extra.todos + [f for f, ids in extra.drafted if set(ids) & clashing]
    d.drafted += [(f, ids) for f, ids in extra.drafted if not set(ids) & clashing]
    d.handled += extra.handled
    d.refused += extra.refused
    ui.say_wrapped(f"recipe init: the configured build compiles {len(unread)} source(s) the "
                   f"first reading did not check ({', '.join(unread[:3])}"
                   f"{' …' if len(unread) > 3 else ''}); scanned again with its model")


#: Variables a setup.py reads that are the build's own, not the project's switches.
_BUILD_VARIABLES = frozenset({"CUDA_HOME", "CUDA_PATH", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS",
                              "NVCC_THREADS", "PATH", "HOME", "PYTHONPATH", "CC", "CXX",
                              "CFLAGS", "CXXFLAGS", "LDFLAGS", "NVCC_FLAGS", "BUILD_VERSION"})


#: A name a recipe's [[build.env]] accepts (what `to_recipe` would refuse is no switch).
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _switch_candidates(reads: Sequence[EnvRead], skip: set[str]) -> list[EnvRead]:
    """The variables a setup.py read that may be its build switches, most likely first: the
    setup.py's own reads, then names that sound like a build switch (a package's imports read
    many variables before setup.py reaches its own: deepspeed's DS_BUILD_OPS)."""
    out: list[EnvRead] = []
    for read in sorted(reads, key=lambda r: (
            not r.where.startswith("setup.py:"),
            not re.search(r"CUDA|BUILD|EXT|OPS?\b|OPS_|KERNEL|COMPILE|FORCE|WITH", r.name))):
        name = read.name
        if not _ENV_NAME.fullmatch(name) or name in _BUILD_VARIABLES or name in skip \
                or name.startswith(("FLASHBUILD_", "_")) \
                or re.search(r"DISABLE|SKIP|(^|_)NO_|ROCM|HIP|VERSION|DEBUG", name) or \
                name in {r.name for r in out}:
            continue
        out.append(read)
    return out


def _find_switch(d: Draft, model: TreeModel, root: Path, spec: ArchSpec, *, platform: str,
                 introspect: Callable[[Recipe, Path, ArchSpec, str], Introspection],
                 ) -> TreeModel | None:
    """A setup.py that builds no CUDA extension as run: try the switches it read (at most
    three, each `1` then `TRUE`; one named for an arch, such as natten's NATTEN_CUDA_ARCH,
    gets `--arch` as `9.0`, `90`, then `90a`, and counts only when the recorded arch flags are
    `--arch`'s); the first that makes record mode see a CUDA extension is drafted into
    [[build.env]], with the line that read it. A switch that makes setup.py read another
    switch it did not read before (`if OPT_IN == "1": ... FORCE_CUDA == "1" or
    torch.cuda.is_available()`, where this machine has no GPU), or raise, is tried together
    with that one."""
    assert d.build is not None
    drafted = {k for _w, values, _c in d.build.env for k in values}

    # The draft's environment as the last attempt left it, its own switch taken out: a
    # switch that reached a parser of the arch list (deepspeed's op builders) ran with the
    # plain spelling (`_plain_arch_list`), which `accept` keeps.
    after: list[tuple[dict[str, Any], dict[str, str], str]] = []

    def attempt(values: dict[str, str]) -> TreeModel | None:
        assert d.build is not None
        before = list(d.build.env)
        d.build.env.append(({"platform": [platform]}, values, ""))
        try:
            return _plain_arch_list(d, introspect(to_recipe(d), root, spec, platform), root,
                                    spec, platform=platform, introspect=introspect).model
        finally:
            after[:] = [t for t in d.build.env if t[1] is not values]
            d.build.env = before

    def cuda_targets(found: TreeModel | None, values: dict[str, str]) -> list[str]:
        if found is None or found.exception is not None:
            return []
        cuda = [t.name for t in found.targets if any(u.language == "CUDA" for u in t.sources)]
        if cuda and any("ARCH" in k.upper() for k in values) and not _asks_for(found, spec):
            return []  # it turns the build on, for another arch: try the next spelling
        return cuda

    def values_for(name: str) -> tuple[str, ...]:
        return ("{arch_dotted}", "{arch_numbers}", "{arch_codes}") if "ARCH" in name.upper() \
            else ("1", "TRUE")

    def accept(found: TreeModel, values: dict[str, str], reads: list[EnvRead]) -> TreeModel:
        cuda = cuda_targets(found, values)
        shown = ", ".join(
            f"{k}={spec.placeholders()[v[1:-1]] if v.startswith('{') else v}"
            for k, v in values.items())
        lines = reads[0].where if len(reads) == 1 else \
            ", ".join(f"{r.name} at {r.where}" for r in reads)
        d.build.env = list(after)  # type: ignore[union-attr]
        d.build.env.append(({"platform": ["windows", "linux"]}, values,  # type: ignore[union-attr]
                            f"setup.py builds its CUDA extension(s) only when "
                            f"{' and '.join(values)} {'are' if len(values) > 1 else 'is'} set "
                            f"({lines}); record mode with {shown} builds {', '.join(cuda)}"))
        return found

    seen = {r.name for r in model.env_reads} | drafted
    for read in _switch_candidates(model.env_reads, drafted)[:3]:
        followed = False
        for value in values_for(read.name):
            found = attempt({read.name: value})
            if cuda_targets(found, {read.name: value}) and found is not None:
                return accept(found, {read.name: value}, [read])
            if found is None or followed or "ARCH" in read.name.upper():
                continue  # (an arch variable's next spelling is tried before any chain)
            # The switch led setup.py to a second one: follow it with this value before
            # another spelling of the first (a chain's `1` seldom wants to be `TRUE`).
            followers = _switch_candidates(found.env_reads, seen | {read.name})[:2]
            followed = bool(followers)
            for second in followers:
                for value2 in values_for(second.name):
                    both = {read.name: value, second.name: value2}
                    found = attempt(both)
                    if found is not None and cuda_targets(found, both):
                        return accept(found, both, [read, second])
    return None


def _toolkit_variable(d: Draft, outcome: Introspection, root: Path, spec: ArchSpec, *,
                      platform: str,
                      introspect: Callable[[Recipe, Path, ArchSpec, str], Introspection],
                      ) -> Introspection:
    """A setup.py that raised because a variable named for the CUDA release is unset
    (torch-memory-saver names its binaries for the major they link: "TMS_CUDA_MAJOR env var
    must be set"): record once more with it set to the toolkit's, as the placeholder
    `{cuda_major}` or `{cuda_version}`, so the build renders it from whichever toolkit builds.
    Drafted only when that run raises no more; else the draft and `outcome` are as they
    were (the TODO then quotes the exception)."""
    assert d.build is not None
    model = outcome.model
    exc = model.exception if model is not None else None
    name = demanded_variable(str(exc), [r.name for r in model.env_reads]) \
        if model is not None and exc is not None else None
    value = toolkit_value(name) if name is not None else None
    if exc is None or name is None or value is None or \
            any(name in values for _w, values, _c in d.build.env):
        return outcome
    table = ({"platform": ["windows", "linux"]}, {name: value},
             f"setup.py raises without {name} ({exc.type} at {exc.where}: "
             f"{exc.message[:100]}); set to the release of the CUDA toolkit that builds, "
             "record mode then runs. REVIEW: module names below that carry the release "
             "are this toolkit's; draft again to build with another CUDA major")
    d.build.env.append(table)
    retry = introspect(to_recipe(d), root, spec, platform)
    if retry.model is None or retry.model.exception is not None:
        d.build.env.remove(table)
        return outcome
    ui.say_wrapped(f"recipe init: setup.py demands {name}; drafted as {value}, the release "
                   "of the toolkit that builds")
    return retry


def _prebuild_jit(d: Draft, model: TreeModel, root: Path, spec: ArchSpec, *, platform: str,
                  introspect: Callable[[Recipe, Path, ArchSpec, str], Introspection],
                  ) -> TreeModel | None:
    """A setup.py that builds no CUDA extension, in a tree whose Python compiles one at run
    time with torch.utils.cpp_extension.load (exllama's cuda_ext.py, as it is imported): the
    files that call it go into `[build] jit`, and the record runs once more; drafted only
    when that record builds a CUDA extension from them (the file computed its load() call
    there), else the draft is as it was and the run-time TODO stands."""
    assert d.build is not None
    if d.build.jit:
        return None
    # One file at a time (at most four): a file whose load() runs only inside a function
    # gives nothing, and a recipe naming it would stop the build.
    found: TreeModel | None = None
    built: list[str] = []
    for candidate in package_loads(model.jit)[:4]:
        d.build.jit.append(candidate)
        tried = introspect(to_recipe(d), root, spec, platform).model
        cuda = [t.name for t in tried.targets if any(u.language == "CUDA" for u in t.sources)] \
            if tried is not None and tried.exception is None else []
        if len(cuda) > len(built):
            found, built = tried, cuda
        else:
            d.build.jit.pop()
    if found is None:
        return None
    files = d.build.jit
    d.build.jit_note = (
        f"the tree compiles {', '.join(built)} at run time (torch.utils.cpp_extension.load in "
        f"{', '.join(files)}); built here ahead of time for --arch, and the installed package's "
        "load() of it answered with the built module")
    ui.say_wrapped(f"recipe init: {', '.join(files)} compile(s) {', '.join(built)} at run "
                   "time; drafted to be built ahead of time (`[build] jit`)")
    return found


#: Folders whose Python is not the package's (a load() there builds a test's helper).
_NOT_PACKAGE = frozenset({"test", "tests", "testing", "bench", "benchmark", "benchmarks",
                          "example", "examples", "scripts", "docs", "tools"})


def package_loads(jit: Sequence[JitSite]) -> list[str]:
    """The files of the package that call torch.utils.cpp_extension.load, in order: not
    those of its tests, benchmarks, examples or scripts."""
    return list(dict.fromkeys(
        j.where.rsplit(":", 1)[0] for j in jit if j.how == CPP_EXTENSION_LOAD
        and not _NOT_PACKAGE & set(PurePosixPath(j.where).parts[:-1])))


def arch_spelling_refused(exc: RaisedError | None, spec: ArchSpec) -> bool:
    """Whether an exception of the tree's Python quotes a piece of the arch list's spelling
    that plain numbers lack: `'0a'` from `int()` on `9.0a`, `12.0f` or `9.0+PTX` in an
    allow-list's message. Such a tree parses TORCH_CUDA_ARCH_LIST itself."""
    if exc is None:
        return False
    pieces: set[str] = set()
    for t in spec.targets:
        tail = str(t.arch.suffix) + ("+PTX" if t.ptx and t.sass else "")
        if tail:
            pieces |= {t.arch.base.dotted + tail, f"{t.arch.minor}{tail}",
                       f"{t.arch.code}{tail}"}
    return any(re.search(rf"(?<![\w.+]){re.escape(p)}(?![\w+])", exc.message)
               for p in pieces)


def _plain_arch_list(d: Draft, outcome: Introspection, root: Path, spec: ArchSpec, *,
                     platform: str,
                     introspect: Callable[[Recipe, Path, ArchSpec, str], Introspection],
                     ) -> Introspection:
    """A setup.py that raised on the suffixed arch list (`9.0a`, `12.0f`, `+PTX`) its own
    Python parses: record once more with the plain numbers (`9.0`). Under the setuptools
    backend TORCH_CUDA_ARCH_LIST only informs the tree's Python: flashbuild's build hook
    gives every CUDAExtension `--arch`'s `-gencode` flags and drops the tree's own, so the
    binary is the same. Kept (the drafted TORCH_CUDA_ARCH_LIST becomes `{arch_dotted}`, with
    the exception as its reason) only when that run raises no more; else the draft is as
    it was and so is `outcome`, which is returned."""
    assert d.build is not None
    exc = outcome.model.exception if outcome.model is not None else None
    if exc is None or not buildsystems.get(d.build.backend).reads_torch_arch_list or \
            not arch_spelling_refused(exc, spec):
        return outcome
    before = list(d.build.env)
    plain = spec.placeholders()["arch_dotted"]
    shown = spec.placeholders()["torch_arch_list"]
    d.build.env = [t for t in d.build.env if "TORCH_CUDA_ARCH_LIST" not in t[1]]
    d.build.env.insert(0, ({"platform": ["windows", "linux"]},
                           {"TORCH_CUDA_ARCH_LIST": "{arch_dotted}"},
                           f"REVIEW: the tree's Python parses TORCH_CUDA_ARCH_LIST and "
                           f"refuses {shown} ({exc.type} at {exc.where}: "
                           f"{exc.message[:120]}); with {plain} it runs, and flashbuild's "
                           f"own -gencode flags still build {spec.label}"))
    retry = introspect(to_recipe(d), root, spec, platform)
    if retry.model is None or retry.model.exception is not None:
        d.build.env = before
        return outcome
    return retry


#: A CMake option named for the CUDA backend (`GGML_CUDA`, `USE_CUDA`, `WITH_GPU`), not a
#: detail of it (`GGML_CUDA_F16`) or a way out (`DISABLE_CUDA`).
_CUDA_OPTION = re.compile(r"^(?:\w+_)?(?:CUDA|GPU)$|^(?:USE|WITH|ENABLE|BUILD)_\w*(?:CUDA|GPU)$")
_NOT_A_SWITCH = re.compile(r"DISABLE|(^|_)NO_|TEST|HIP|ROCM|STATIC")


def cmake_switch_candidates(root: Path, top: str) -> list[tuple[str, str, str]]:
    """(variable, value, file:line) that may turn a CMake project's CUDA backend on, most
    likely first: a cache variable whose STRINGS list a CUDA choice (atlas-engine's
    `ATLAS_DEVICE_SYSTEM` is `TBB` by default, `CUDA` on request), then an `option()` named
    for CUDA whose default is not ON (llama.cpp's `GGML_CUDA`)."""
    strings: list[tuple[str, str, str]] = []
    options: list[tuple[str, str, str]] = []
    for cmd in _cmake_commands(root, top):
        where = f"{cmd.file}:{cmd.line}"
        args = cmd.args
        if cmd.name == "set_property" and len(args) > 4 and args[0] == "CACHE" and \
                args[2] == "PROPERTY" and args[3] == "STRINGS":
            choice = next((v for v in args[4:] if v.upper() == "CUDA"), None) or next(
                (v for v in args[4:] if "CUDA" in v.upper() or v.upper() == "GPU"), None)
            if choice is not None and _ENV_NAME.fullmatch(args[1]):
                strings.append((args[1], choice, where))
        elif cmd.name == "option" and args and _CUDA_OPTION.match(args[0]) and \
                not _NOT_A_SWITCH.search(args[0]) and \
                (len(args) < 3 or args[2].upper() not in ("ON", "TRUE", "1", "YES")):
            options.append((args[0], "ON", where))
    out: list[tuple[str, str, str]] = []
    for name, value, where in [*strings, *sorted(options, key=lambda o: len(o[0]))]:
        if name not in {n for n, _v, _w in out}:
            out.append((name, value, where))
    return out


def _find_cmake_switch(d: Draft, root: Path, spec: ArchSpec, *, platform: str,
                       introspect: Callable[[Recipe, Path, ArchSpec, str], Introspection],
                       ) -> Introspection | None:
    """A CMake project whose configuration as written compiles no CUDA, or does not configure
    here (atlas-engine's default backend needs TBB): the switches `cmake_switch_candidates`
    finds are tried as `-D` defines (at most three); the first whose configure compiles CUDA
    units is drafted into `[[build.options]]`, with the line that declares it. Nothing found:
    the outcome stands (a CPU library is not the build; apply_model says so)."""
    assert d.build is not None
    if d.build.cmake_source is None:
        return None
    top = posixpath.normpath(f"{d.build.cmake_source}/CMakeLists.txt")
    drafted = {k for values, _c in d.build.options for k in values}
    for name, value, where in [c for c in cmake_switch_candidates(root, top)
                               if c[0] not in drafted][:3]:
        d.build.options.append(({name: value}, ""))
        found = introspect(to_recipe(d), root, spec, platform)
        d.build.options.pop()
        model = found.model
        if model is not None and any(u.language == "CUDA" for t in model.targets
                                     for u in t.sources):
            d.build.options.append((
                {name: value}, f"{name}: the CUDA backend ({where}); as written the project "
                "configures without it (compiles no CUDA, or stops on the other backend's "
                f"dependencies); configured with {name}={value} it compiles CUDA"))
            return found
    return None


def _asks_for(model: TreeModel, spec: ArchSpec) -> bool:
    """Whether the recorded arch flags ask for exactly `--arch`'s SASS (or there are none to
    read: torch's builds get `--arch`'s from the build hook)."""
    got = read_arch_flags(sorted(model.arch_flags()))
    return not got.found or (got.sass == {t.arch.sm for t in spec.targets if t.sass}
                             and not got.wide)


def _steer_literal_archs(d: Draft, model: TreeModel, root: Path, spec: ArchSpec, *,
                         platform: str,
                         introspect: Callable[[Recipe, Path, ArchSpec, str], Introspection],
                         ) -> TreeModel | None:
    """A CMake project whose configured units compile another arch than `--arch` because its
    CMake files write a literal list (a target's CUDA_ARCHITECTURES "75;80;86;89", which
    wins over CMAKE_CUDA_ARCHITECTURES; `set(CMAKE_CUDA_ARCHITECTURES 80)`): the edits that
    make each read CMAKE_CUDA_ARCHITECTURES are tried on a copy of the tree, configured again,
    and drafted as `replace-block` steps only when that configure compiles exactly `--arch`'s
    SASS. Otherwise nothing is drafted: the build's arch check stops before compiling and its
    fix names the line (building/backends/cmake.py, `arch_fix`)."""
    if _asks_for(model, spec):
        return None
    sites = literal_arch_lists(root)
    if not sites:
        return None
    have = read_arch_flags(sorted(model.arch_flags()))
    want = sorted(t.arch.sm for t in spec.targets if t.sass)
    with tempfile.TemporaryDirectory(prefix="flashbuild-archlists-") as tmp:
        copy = Path(tmp) / root.name
        # The tree's links stay links (a copy never follows one out of the tree).
        shutil.copytree(root, copy, symlinks=True,
                        ignore=shutil.ignore_patterns(".git", ".flashbuild"))
        for site in sites:
            path = copy / site.file
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
            line = lines[site.line - 1]
            indent = line[:len(line) - len(line.lstrip())]
            ending = line[len(line.rstrip("\r\n")):]
            lines[site.line - 1] = indent + site.replacement + ending
            path.write_text("".join(lines), encoding="utf-8")
        retry = introspect(to_recipe(d), copy, spec, platform)
    found = retry.model
    if found is None or found.exception is not None or not found.arch_flags() or \
            not _asks_for(found, spec):
        return None
    for n, site in enumerate(sites, 1):
        d.steps.append(DraftStep(
            id=f"arch-from-flag-{n}" if len(sites) > 1 else "arch-from-flag",
            description=f"{site.file}:{site.line} writes its own arch list; read --arch "
            "(CMAKE_CUDA_ARCHITECTURES) instead",
            transform="replace-block",
            params={"file": site.file, "anchor": site.text, "block": site.replacement},
            when={"platform": ["linux", "windows"]},
            comment=textwrap.fill(
                f"REVIEW: as configured the build compiled for "
                f"{' '.join(sorted(have.sass | have.wide))}, not {' '.join(want)}: "
                f"{site.file}:{site.line} writes `{site.text}`. Proven: configured again "
                f"with {'these edits' if len(sites) > 1 else 'this edit'}, it compiles for "
                f"{' '.join(want)}.", 96, break_long_words=False, break_on_hyphens=False)))
    return found


def _steer_arch(d: Draft, model: TreeModel, root: Path, spec: ArchSpec, *, platform: str,
                introspect: Callable[[Recipe, Path, ArchSpec, str], Introspection],
                ) -> TreeModel | None:
    """A setup.py whose own build chooses the arch (natten runs CMake with the arch from
    NATTEN_CUDA_ARCH, or from the GPU it sees) and records flags for another arch than
    `--arch`: try the variables it read whose names say ARCH, as `9.0`, `90`, `90a`; the
    first that makes the recorded arch flags exactly `--arch`'s is drafted. None found is a
    TODO: building as recorded would compile for the wrong GPU. (torch's own builds never get
    here: the build hook gives every CUDAExtension `--arch`'s flags.)"""
    assert d.build is not None
    if _asks_for(model, spec):
        return None
    want = {t.arch.sm for t in spec.targets if t.sass}
    have = read_arch_flags(sorted(model.arch_flags()))
    names = [r for r in model.env_reads if "ARCH" in r.name.upper()
             and r.name != "TORCH_CUDA_ARCH_LIST"]
    for read in list({r.name: r for r in names}.values())[:3]:
        for value in ("{arch_dotted}", "{arch_numbers}", "{arch_codes}"):
            d.build.env.append(({"platform": [platform]}, {read.name: value}, ""))
            retry = introspect(to_recipe(d), root, spec, platform)
            d.build.env.pop()
            found = retry.model
            if found is not None and found.exception is None and \
                    found.arch_flags() and _asks_for(found, spec):
                shown = spec.placeholders()[value[1:-1]]
                d.build.env.append(({"platform": ["windows", "linux"]}, {read.name: value},
                                    f"the build takes its arch from {read.name} "
                                    f"({read.where}): as run it compiled for "
                                    f"{' '.join(sorted(have.sass | have.wide))}; with "
                                    f"{read.name}={shown} for {' '.join(sorted(want))}"))
                return found
    d.build.todos.append(BuildTodo(
        table="build", what=f"the build compiles for {' '.join(sorted(have.sass | have.wide))}"
        f", not for {' '.join(sorted(want))}",
        evidence=f"{model.via}: {' '.join(sorted(model.arch_flags())[:4])}"
        + (f"; arch variables it reads: {', '.join(r.name for r in names[:4])}" if names
           else ""),
        fix="set the tree's own arch variable in [[build.env]] (its value as the tree spells "
        "arches), or patch where it picks the arch"))
    return None


def to_recipe(d: Draft, output: Path | None = None) -> Recipe:
    """The draft as the recipe loader validates it, from the typed draft (`draft_data`), not
    from its TOML: each introspection and planning round reads this, and `render` runs once
    (a draft that does not load is a bug here). `output`: where it will be written."""
    return recipe_from_data(draft_data(d), output)


def _check_output(output: Path) -> None:
    """Refuse an `-o` that cannot become the recipe file before the scan runs."""
    problem = ("is a folder" if output.is_dir() else
               "is in a folder that does not exist" if not output.parent.is_dir() else "")
    if problem:
        raise UsageError(f"`-o {output}` {problem}",
                         evidence="recipe init writes one recipe file there",
                         fix="pass `-o` the path of a .toml file in an existing folder")


def _build_json(b: BuildDraft) -> dict[str, Any]:
    return {"backend": b.backend,
            "env": [{"when": w, "set": v} for w, v, _c in b.env],
            "cmake_source": b.cmake_source, "targets": [a.target for a in b.artifacts],
            "output_dir_var": b.output_dir_var, "exclude_var": b.exclude_var,
            "options": [define for define, _c in b.options],
            "artifacts": [{"name": a.name, "kind": a.kind, "target": a.target}
                          for a in b.artifacts],
            "install": {"package": b.package, "package_dir": b.package_dir}
            if b.package is not None else None,
            "exports": list(b.exports),
            "todos": [{"table": t.table, "what": t.what, "evidence": t.evidence, "fix": t.fix}
                      for t in b.todos]}
