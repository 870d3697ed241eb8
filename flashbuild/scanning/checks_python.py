"""Python checks (setup.py and packages), on the standard `ast` parse.

FB180 ctypes with a hard-coded POSIX library name, FB181 a package `__init__` that imports
an extension module without `os.add_dll_directory`, FB182 a hard-coded `.so` suffix; and
the facts the tree-wide pass needs: sources that setup.py lists, with the `if` tests around
them, and NOMINMAX passed as a macro.
"""

from __future__ import annotations

import ast
import re
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flashbuild.scanning.facts import (
    TREE_DEFINES,
    ExtensionImportFacts,
    LibraryNameFacts,
    TreeCheck,
)
from flashbuild.scanning.findings import (
    Category,
    FileReport,
    FileText,
    Finding,
    Fix,
    ScanTarget,
    Severity,
    source_line,
)
from flashbuild.scanning.gates import Gate, Mention, gate_from_words
from flashbuild.scanning.proposals import LOADER_SHIM
from flashbuild.source.setuppy import names_other_stack, parse_python

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from flashbuild.scanning.facts import Facts

POSIX_LIB = re.compile(r"^(?:.*/)?lib[\w+.-]*\.so(?:\.\d+)*$")
UNVERSIONED = re.compile(r"\.so$")
SO_SUFFIX = re.compile(r"\.so$")
WINDOWS_SUFFIX = re.compile(r"\.(?:pyd|dll|lib)$", re.IGNORECASE)
#: The text of a file with a string `WINDOWS_SUFFIX` matches holds this (unanchored).
_MAY_END_IN_WINDOWS_SUFFIX = re.compile(r"\.(?:pyd|dll|lib)\b", re.IGNORECASE)
SOURCE = re.compile(r"\.(cu|cpp|cc|cxx|c)$")
CDLL_NAMES = frozenset({"CDLL", "PyDLL", "LoadLibrary", "cdll", "dlopen"})
_WIN_NAME = re.compile(r"(?:^|_)(?:IS_)?WIN(?:DOWS|32|64)?(?:$|_)", re.IGNORECASE)
#: A file none of whose text matches this holds nothing the visitor reports or records
#: (no library load, no `.so`, no source name, no NOMINMAX): its parse is skipped. Most of
#: a Python package is such files, and the ast walk is the scan's costliest per-file step.
_NEEDS_AST = re.compile(r"CDLL|PyDLL|LoadLibrary|cdll|dlopen|\.so\b|NOMINMAX|_USE_MATH_DEFINES|"
                        r"\.(?:cu|cpp|cc|cxx|c)[\"']")


#: A define passed as a compiler flag (`-DNOMINMAX`, `/D_USE_MATH_DEFINES=1`).
_DEFINE_FLAG = re.compile(r"^[-/]D\s*(\w+)(?:=.*)?$")


def _snippet(file: FileText, line: int) -> str:
    return source_line(file.text, line)


def _call_name(node: ast.Call) -> str:
    f = node.func
    if isinstance(f, ast.Attribute):
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    return ""


@dataclass
class _Visitor(ast.NodeVisitor):
    file: FileText
    target: ScanTarget
    report: FileReport

    def __post_init__(self) -> None:
        self.gates: list[Gate] = []
        # Code of another accelerator stack's backend (`op_builder/xpu/`, `rocm_utils.py`)
        # never runs in a CUDA build: its library names are not this build's problem.
        parts = self.file.path.removesuffix(".py").split("/")
        self.other_stack = any(names_other_stack(part) for part in parts)
        self.cdll_args: set[int] = set()
        self.paired: set[int] = set()
        self._sub_project = self.file.path.endswith("/setup.py")
        self._dispatch: dict[type[ast.AST], Callable[[Any], None]] = {
            ast.If: self.visit_If, ast.IfExp: self.visit_IfExp, ast.Call: self.visit_Call,
            ast.Constant: self.visit_Constant}
        # Lines as the parser numbers them (\r\n, \r and \n end a line; str.splitlines
        # would also split at form feeds and other separators the parser does not count).
        self._lines = self.file.text.replace("\r\n", "\n").replace("\r", "\n").split("\n")

    def _wanted(self, node: ast.AST) -> bool:
        """A statement is visited only if its lines can hold what the visitor reports or
        records (`_NEEDS_AST`, the test the whole file passed): any string, call or name it
        holds lies within them, so one with no match adds nothing, whatever gates hold it.
        Big files are mostly such statements."""
        if not isinstance(node, ast.stmt):
            return True
        text = "\n".join(self._lines[node.lineno - 1:node.end_lineno or node.lineno])
        return _NEEDS_AST.search(text) is not None

    def visit(self, node: ast.AST) -> None:
        """`NodeVisitor.visit` with the four methods looked up by type once, and children
        taken straight from their fields: same order, same calls, a third of the time (the
        per-node `getattr(self, "visit_" + name)` and generic_visit were most of it)."""
        method = self._dispatch.get(type(node))
        if method is not None:
            method(node)
        else:
            self.generic_visit(node)

    def generic_visit(self, node: ast.AST) -> None:
        visit = self.visit
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST) and self._wanted(item):
                        visit(item)
            elif isinstance(value, ast.AST):
                visit(value)

    def pair_all(self, nodes: Sequence[ast.AST]) -> None:
        """`_pair_suffixes` for every statement of the file, before the visit (`paired` is
        only read while visiting, so computing it up front is the same). Skipped when no
        string of the file ends in a Windows suffix: then nothing pairs, and the walk of every
        statement's expressions was the costliest part of the Python checks."""
        if not any(isinstance(n, ast.Constant) and isinstance(n.value, str)
                   and WINDOWS_SUFFIX.search(n.value) for n in nodes):
            return
        for node in nodes:
            if isinstance(node, ast.stmt):
                self._pair_suffixes(node)

    def _pair_suffixes(self, stmt: ast.stmt) -> None:
        """`.so` literals that share an expression of this statement with a Windows suffix
        (`exists(f"{n}.so") or exists(f"{n}.lib")`, `(".so", ".pyd")`): the code names both
        platforms, so the `.so` is not a Windows bug."""
        for _field, value in ast.iter_fields(stmt):
            values = value if isinstance(value, list) else [value]
            for expr in (v for v in values if isinstance(v, ast.expr)):
                consts = [(n, n.value) for n in ast.walk(expr) if isinstance(n, ast.Constant)
                          and isinstance(n.value, str)]
                if any(WINDOWS_SUFFIX.search(v) for _n, v in consts):
                    self.paired.update(id(n) for n, v in consts if SO_SUFFIX.search(v))

    def visit_If(self, node: ast.If) -> None:
        self._gated(node.test, node.body, node.orelse)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        # `".dll" if IS_WINDOWS else ".so"`: the `.so` branch is the POSIX one.
        self._gated(node.test, [node.body], [node.orelse])

    def _gated(self, test: ast.expr, body: Sequence[ast.AST], orelse: Sequence[ast.AST]
               ) -> None:
        parts = list(ast.walk(test))
        words = [n.value for n in parts if isinstance(n, ast.Constant)
                 and isinstance(n.value, str)]
        # A flag named for the platform (IS_WINDOWS, _IS_WIN32) tests it like sys.platform.
        words += ["win32" for n in parts if isinstance(n, ast.Name | ast.Attribute)
                  and _WIN_NAME.search(n.id if isinstance(n, ast.Name) else n.attr)]
        if any(isinstance(n, ast.Not | ast.NotEq) for n in parts):
            words.append("not")
        text = ast.unparse(test)
        self.visit(test)
        self.gates.append(gate_from_words(text, words, negated=False))
        for stmt in body:
            if self._wanted(stmt):
                self.visit(stmt)
        g = self.gates.pop()
        self.gates.append(Gate(text=f"not ({g.text})", archs=g.archs, platform=g.platform,
                               negated=not g.negated))
        for stmt in orelse:
            if self._wanted(stmt):
                self.visit(stmt)
        self.gates.pop()

    def visit_Call(self, node: ast.Call) -> None:
        name = _call_name(node)
        if name in CDLL_NAMES and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and \
                    POSIX_LIB.match(arg.value):
                self.cdll_args.add(id(arg))
                self._cdll(node, arg.value)
        if name in ("define_macros",):
            pass
        for kw in node.keywords:
            if kw.arg == "define_macros":
                for n in ast.walk(kw.value):
                    if isinstance(n, ast.Constant) and n.value in TREE_DEFINES:
                        self.report.facts.setdefault("defines", []).append(n.value)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if not isinstance(node.value, str):
            return
        value = node.value
        flag = _DEFINE_FLAG.match(value)
        if flag and flag[1] in TREE_DEFINES and not self._sub_project:
            # `-D_USE_MATH_DEFINES` in a flag list defines it for every unit it reaches; a
            # setup.py below the root builds another project (flash-attention's hopper/).
            self.report.facts.setdefault("defines", []).append(flag[1])
        if SOURCE.search(value) and "\n" not in value:
            self.report.facts.setdefault("mentions", []).append(
                Mention(value, self.file.path, node.lineno, tuple(self.gates)))
        # Globs (`*.so` in an ignore list) only filter; they do not load anything.
        if self.target.platform == "windows" and SO_SUFFIX.search(value) and \
                not any(ch in value for ch in "*?[") and not self.other_stack and \
                not _other_stack_library(value) and \
                id(node) not in self.cdll_args and id(node) not in self.paired and \
                "\n" not in value and \
                not any((g.platform == "posix") != g.negated for g in self.gates
                        if g.platform):
            self._add(node, "FB182", Severity.ERROR,
                      f"hard-coded `.so` in {value!r}: Windows extension modules are .pyd and "
                      "libraries .dll",
                      f"string literal {value!r}",
                      Fix(manual="build the name from importlib.machinery.EXTENSION_SUFFIXES "
                          "(modules) or pick .dll/.so by platform (libraries)"),
                      LibraryNameFacts(literal=value))

    def _cdll(self, call: ast.Call, name: str) -> None:
        if any((g.platform == "posix") != g.negated for g in self.gates if g.platform):
            return  # already behind a POSIX test
        if self.other_stack or _other_stack_library(name):
            return  # a ROCm/XPU/... runtime: not loaded by a CUDA build
        if self.target.platform == "windows":
            self._add(call, "FB180", Severity.ERROR,
                      f"ctypes loads {name!r}, a Linux library name that does not exist on "
                      "Windows", f"{_call_name(call)}({name!r})",
                      Fix(manual="resolve the library per platform (cudart64_13.dll on "
                          "Windows, libcudart.so.13 on Linux), e.g. with ctypes.util.find_library "
                          "or the nvidia/cu13 wheel folder"))
        elif UNVERSIONED.search(name) and name.rsplit("/", 1)[-1].startswith("libcu"):
            self._add(call, "FB180", Severity.WARNING,
                      f"ctypes loads the unversioned {name!r}, which only a CUDA dev install "
                      "has", f"{_call_name(call)}({name!r}); the PyPI CUDA wheels ship only the "
                      "versioned name (libcudart.so.13)",
                      Fix(manual="load the versioned soname (libcudart.so.13)"))

    def _add(self, node  # noqa: PLR0917 - one call shape for every rule
            : ast.expr | ast.stmt, rule: str, sev: Severity, message: str,
             evidence: str, fix: Fix, facts: Facts | None = None) -> None:
        line, col = node.lineno, node.col_offset + 1
        cat = Category.PYTHON_PACKAGING
        self.report.findings.append(Finding(
            rule=rule, category=cat, path=self.file.path, line=line, col=col, severity=sev,
            message=message, evidence=evidence, snippet=_snippet(self.file, line), fix=fix,
            facts=facts))


#: Runtime libraries of other accelerator stacks whose names `names_other_stack` does not
#: split out (`libamdhip64.so`, `librocblas.so`, `libze_loader.so`).
_OTHER_STACK_LIBS = ("amdhip", "rocblas", "rocm", "hipblas", "hiprtc", "miopen", "rccl",
                     "roctx", "roctracer", "hsa", "ze_", "sycl", "ascendcl", "hccl", "cnrt",
                     "cnnl", "musa", "mccl", "habana", "synapse", "torch_npu", "torch_mlu")


def _other_stack_library(literal: str) -> bool:
    """Whether a library file name (`libamdhip64.so`, `/opt/rocm/lib/libhsa-runtime64.so.1`,
    `libsycl.so`) belongs to an accelerator stack other than CUDA, or to WebAssembly."""
    stem = literal.replace("\\", "/").rpartition("/")[2].split(".so")[0].removeprefix("lib")
    if "emscripten" in literal or "wasm32" in literal:
        return True  # a WebAssembly module's suffix (`.cpython-311-wasm32-emscripten.so`)
    return names_other_stack(stem) or stem.lower().startswith(_OTHER_STACK_LIBS) or \
        any(names_other_stack(part) for part in literal.replace("\\", "/").split("/")[:-1])


def _may_import_package(file: FileText) -> bool:
    """Whether the text can hold an import `_package_imports` reports (`import pkg.mod`,
    `from pkg import mod`, `from pkg.mod import x`, where pkg is the file's top folder): each
    spells `pkg.` or `from pkg`. A file without either is not parsed for its imports (most
    files of a Python package import nothing of their own package by absolute name)."""
    top = file.path.split("/")[0] if "/" in file.path else ""
    if not top or top not in file.text:
        return False
    return re.search(rf"\b{re.escape(top)}\.|\bfrom\s+{re.escape(top)}\b", file.text) is not None


def check_python(file: FileText, target: ScanTarget) -> FileReport:
    report = FileReport(file.path)
    init = target.platform == "windows" and file.path.rpartition("/")[2] == "__init__.py"
    needs_visit = _NEEDS_AST.search(file.text) is not None
    imports = target.platform == "windows" and _may_import_package(file)
    if not init and not needs_visit and not imports:
        if target.platform == "windows":
            report.facts["package_imports"] = []
        return report
    nodes: Sequence[ast.AST]
    if needs_visit:
        try:
            tree = parse_python(file.text, file.path)
        except SyntaxError as exc:
            report.facts["note"] = f"not parsed as Python: {exc.msg} (line {exc.lineno})"
            return report
        visitor = _Visitor(file, target, report)
        if _MAY_END_IN_WINDOWS_SUFFIX.search(file.text):  # else no string can pair
            visitor.pair_all(list(ast.walk(tree)))
        visitor.visit(tree)
        nodes = _statements(tree)  # the imports below, in ast.walk's order
    else:
        # A Windows __init__.py or an importer: only its imports count, and parsing just
        # the import statements costs a fraction of parsing the file (most of a static
        # scan of FlashRT's Python went to ast.parse of whole modules for their imports).
        nodes = _import_statements(file.text)
    if target.platform == "windows" and file.path.rpartition("/")[2] == "__init__.py":
        _dll_directory(file, nodes, report)
    if target.platform == "windows":
        report.facts["package_imports"] = _package_imports(file, nodes)
    return report


_IMPORT_LINE = re.compile(r"^([ \t]*)(?:from[ \t]+[.\w]+[ \t]+import\b|import[ \t]+\w)",
                          re.MULTILINE)


def _import_statements(text: str) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of a module, each parsed on its own with `ast` (line and column
    as in the file), without parsing the module: a line that starts an import, continued
    through its parentheses or backslashes. Ordered as `_statements` walks them (outer
    statements first). A line inside a string that looks like an import is read as one; a
    fragment that does not parse is skipped."""
    out: list[ast.Import | ast.ImportFrom] = []
    for m in _IMPORT_LINE.finditer(text):
        start = m.start()
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        chunk = text[start:end]
        if "(" in chunk.partition("#")[0] and ")" not in chunk.partition("#")[0]:
            close = text.find(")", end)
            end = len(text) if close < 0 else close + 1
        else:
            while text[start:end].rstrip().endswith("\\") and end < len(text):
                nxt = text.find("\n", end + 1)
                end = len(text) if nxt < 0 else nxt
        try:
            module = ast.parse(text[start:end].strip())
        except (SyntaxError, ValueError):
            continue
        line = text.count("\n", 0, start) + 1
        for node in module.body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                ast.increment_lineno(node, line - 1)
                node.col_offset = len(m[1])
                out.append(node)
    return sorted(out, key=lambda n: (n.col_offset, n.lineno))


_STATEMENT_HOLDERS = (ast.stmt, ast.ExceptHandler, ast.match_case, ast.Module)


def _statements(tree: ast.Module) -> list[ast.AST]:
    """The nodes `ast.walk` yields that are statements or hold statements, in its order (a
    breadth-first walk that does not enter expressions: no statement sits inside one, so the
    order of what is kept is unchanged). Imports are statements; walking every expression
    of a large file only to find them was most of the Python checks' time."""
    out: list[ast.AST] = []
    todo: deque[ast.AST] = deque([tree])
    while todo:
        node = todo.popleft()
        out.append(node)
        todo.extend(child for child in ast.iter_child_nodes(node)
                    if isinstance(child, _STATEMENT_HOLDERS))
    return out


def _package_imports(file: FileText, nodes: Sequence[ast.AST]) -> list[tuple[str, str, int]]:
    """(package, module, line) for each `import pkg.mod` / `from pkg import mod` /
    `from pkg.mod import x` where `pkg` is the top folder this file lives in: the tree-wide
    pass asks which of them are extension modules the build makes."""
    top = file.path.split("/")[0] if "/" in file.path else ""
    if not top:
        return []
    out: list[tuple[str, str, int]] = []
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] != top:
                continue
            mods = parts[1:2] or [a.name for a in node.names]
            out.extend((top, m, node.lineno) for m in mods)
        elif isinstance(node, ast.Import):
            out.extend((top, a.name.split(".")[1], node.lineno) for a in node.names
                       if a.name.split(".")[0] == top and "." in a.name)
    return out


def _dll_directory(file: FileText, nodes: Sequence[ast.AST], report: FileReport) -> None:
    """FB181: `from ._ext import x` / `from . import _ext` where no `_ext.py` exists is an
    extension import (the sibling-file check runs in the tree-wide pass)."""
    if "add_dll_directory" in file.text:
        return
    package = file.path.rpartition("/")[0].rpartition("/")[2]
    for node in nodes:
        if not isinstance(node, ast.ImportFrom | ast.Import):
            continue
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            names = [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] == package:  # `from pkg import _C` / `from pkg._C import f`
                names = parts[1:2] or [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".")[1] for a in node.names
                     if a.name.split(".")[0] == package and "." in a.name]
        for name in names:
            if name.startswith("_") and not name.startswith("__"):
                report.findings.append(Finding(
                    rule="FB181", category=Category.PYTHON_PACKAGING, path=file.path,
                    line=node.lineno, col=node.col_offset + 1, severity=Severity.WARNING,
                    message=f"the package imports `{name}`, an extension module, and never "
                    "registers DLL folders: on Windows the import fails with 'DLL load failed'",
                    evidence=f"relative import of `{name}` with no `{name}.py` beside it and no "
                    "os.add_dll_directory in this __init__.py",
                    snippet=_snippet(file, node.lineno),
                    fix=Fix(manual="the install step of `flashbuild build` adds a loader "
                            "shim to this __init__.py; without flashbuild, call "
                            "os.add_dll_directory for the CUDA "
                            "runtime's folder before the import", step=LOADER_SHIM),
                    facts=ExtensionImportFacts(module=name,
                                               needs=TreeCheck.NO_SIBLING_MODULE)))
                return
