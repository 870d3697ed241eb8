"""The tree model: what a configured build of a kernel tree compiles, read from the build
system itself rather than from the text.

A `TreeModel` says which targets (CMake) or extensions (setup.py) this configuration builds,
their sources, and per source its language, include folders, defines, flags and the arch
flags that reach nvcc, each with where it came from; plus the tree's own arch variable (e.g.
`GPU_ARCH`) when one was confirmed, the environment variables a setup.py read, and what made a
setup.py stop. It is made from a CMake File API reply (`from_cmake`) or a setup.py record
(`from_record`); pipeline/introspect.py runs the configure or the record that produces them.
When neither can run, `Introspection.fallback` says why in one line, and the readers of the
text are used instead.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import shlex
import types
import typing
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal

from flashbuild.buildsystems import BackendName  # noqa: TC001 (hints are resolved at run time)
from flashbuild.source import setup_record
from flashbuild.source.nvccflags import arch_text, split_arch_flags

if TYPE_CHECKING:
    from flashbuild.source.cmake_fileapi import Reply, Setting, Target
    from flashbuild.source.setup_record import EnvRead, NetworkCall, RaisedError, SetupRecord

TargetKind = Literal["module", "plugin", "library", "executable", "other"]
ArchForm = Literal["arch_numbers", "arch_codes", "arch_dotted"]


@dataclass(frozen=True)
class SourceUnit:
    """One compiled source as the configured build compiles it."""

    path: str
    """Relative to the tree (posix); absolute when outside it."""
    language: str
    """`CUDA`, `CXX` or `C`."""
    includes: tuple[str, ...]
    defines: tuple[str, ...]
    flags: tuple[str, ...]
    arch_flags: tuple[str, ...]
    """The flags that choose what nvcc emits (`-gencode=arch=compute_90a,code=sm_90a`)."""
    origin: str
    """Where the flags came from: the CMake command and file:line of the arch flags, or the
    compile command torch's build.ninja holds."""


@dataclass(frozen=True)
class BuildTarget:
    """A target (CMake) or an extension (setup.py) this configuration builds."""

    name: str
    kind: TargetKind
    """`module`: a Python extension module; `plugin`: another shared library."""
    artifact: str
    """The file name it builds (`flash_vla_kernels.cpython-311-x86_64-linux-gnu.so`), or ''."""
    sources: tuple[SourceUnit, ...]
    defined_at: str
    """`CMakeLists.txt:432 (pybind11_add_module)`, or the extension's name in setup.py."""


@dataclass(frozen=True)
class ArchVariable:
    """The tree's own variable that chooses the arch, confirmed by configuring with it."""

    name: str
    form: ArchForm
    """The placeholder whose rendering the tree accepted (`90`, `90a`, `9.0`)."""
    value: str
    evidence: str
    """What the configure produced with it (`-gencode=arch=compute_90a,code=sm_90a`)."""


@dataclass(frozen=True)
class Bindings:
    """The names a module's bindings register, read from its preprocessed translation unit
    (so only registrations this configuration compiles count)."""

    module: str
    source: str
    """The translation unit holding PYBIND11_MODULE / NB_MODULE (tree-relative)."""
    names: tuple[str, ...]
    error: str = ""
    """Why the unit could not be preprocessed (then `names` is empty and means nothing)."""
    stubbed: tuple[str, ...] = ()
    """Headers this machine lacks that were stubbed so the unit preprocessed (a CPU-only
    torch has no `c10/cuda/impl/cuda_cmake_macros.h`): the names come from the unit itself."""


@dataclass(frozen=True)
class JitSite:
    """A place where the tree compiles CUDA code at run time (its kernels are "compiled at run
    time", not by the build)."""

    where: str
    """`pkg/jit/build.py:42`."""
    how: str
    """`torch.utils.cpp_extension.load`, `load_inline`, `nvrtcCreateProgram`, `RawKernel`,
    `RawModule`, or `nvcc` run by the tree itself."""
    arch_flags: tuple[str, ...] = ()
    """Arch flags written in the same call (`-gencode=…`, `-arch=sm_90a`, `--gpu-architecture`)."""


@dataclass(frozen=True)
class TreeModel:
    """What one configuration of the tree builds (see the module docstring)."""

    system: BackendName
    via: str
    """How it was read: `CMake File API (codemodel-v2, cache-v2)`, `setup.py record mode`."""
    targets: tuple[BuildTarget, ...]
    arch_variable: ArchVariable | None = None
    cache: tuple[tuple[str, str], ...] = ()
    """CMake cache variables the project defines (name, value), CMake's own left out."""
    env_reads: tuple[EnvRead, ...] = ()
    argv_options: tuple[EnvRead, ...] = ()
    """setup.py options the tree looked for on its command line (`--cuda_ext`)."""
    network: tuple[NetworkCall, ...] = ()
    exception: RaisedError | None = None
    notes: tuple[str, ...] = ()
    """What introspection did that a reader should know (a stand-in for a missing library)."""
    bindings: tuple[Bindings, ...] = ()
    jit: tuple[JitSite, ...] = ()
    """Where the tree compiles kernels at run time."""
    missing_sources: tuple[str, ...] = ()
    """Sources the configuration compiles that were not there when it was read (after
    setup.py's own generators ran): a tree that left them out (an sdist without csrc/)."""
    needed_defines: tuple[tuple[str, str, str], ...] = ()
    """CMake cache definitions the configure could not run without (name, value, the error
    that proved it): the build must pass them too."""
    seconds: float = 0.0

    def modules(self) -> tuple[BuildTarget, ...]:
        return tuple(t for t in self.targets if t.kind == "module")

    def compiled(self) -> set[str]:
        """Every source this configuration compiles (tree-relative)."""
        return {u.path for t in self.targets for u in t.sources}

    def arch_flags(self) -> set[str]:
        return {f for t in self.targets for u in t.sources for f in u.arch_flags}

    def unit(self, path: str) -> SourceUnit | None:
        return next((u for t in self.targets for u in t.sources if u.path == path), None)


@dataclass(frozen=True)
class Introspection:
    """The outcome of asking the build: a model, or the one-line reason there is none."""

    model: TreeModel | None
    fallback: str = ""
    """Why static reading is used instead (empty when there is a model)."""
    seconds: float = 0.0
    cached: bool = False
    """The model was stored by an earlier run with the same inputs (nothing ran now)."""


def relative(path: str, root: Path) -> str:
    """`path` relative to `root` (posix) when inside it, else as it is."""
    p = PurePosixPath(path.replace("\\", "/"))
    if not p.is_absolute():
        return p.as_posix()
    try:
        return p.relative_to(PurePosixPath(root.as_posix())).as_posix()
    except ValueError:
        return p.as_posix()


def split_fragments(fragments: tuple[Setting, ...]) -> tuple[list[str], list[str], str]:
    """(flags, arch flags, origin of the arch flags) of a compile group's fragments."""
    flags: list[str] = []
    arch: list[str] = []
    origin = ""
    for frag in fragments:
        try:
            tokens = shlex.split(frag.value)
        except ValueError:
            tokens = frag.value.split()
        other, found = split_arch_flags(tokens)
        flags += other
        arch += found
        if found and not origin and frag.origin is not None:
            origin = str(frag.origin)
    return flags, arch, origin


_KINDS: dict[str, TargetKind] = {"MODULE_LIBRARY": "module", "SHARED_LIBRARY": "plugin",
                                 "STATIC_LIBRARY": "library", "OBJECT_LIBRARY": "library",
                                 "EXECUTABLE": "executable"}


#: Bytes of a source read for a module's init function (a source is read once per target).
_INIT_READ_LIMIT = 4 << 20


def _defines_module(target: Target, source_root: Path, stem: str) -> bool:
    """Whether a SHARED library is a Python module by its own sources: one defines the init
    function Python looks for in `<stem>.so` (`PyInit_libKMCUDA` in libKMCUDA's python.cc,
    built by `add_library(KMCUDA SHARED …)` with CMake's `lib` prefix), or pybind11's or
    nanobind's module macro with that name. Python imports such a file by its stem: `.so`
    is one of its extension suffixes."""
    if not stem.isidentifier():
        return False
    init = re.compile(rf"\bPyInit_{re.escape(stem)}\s*\(|\b(?:PYBIND11|NB)_MODULE\s*\(\s*"
                      rf"{re.escape(stem)}\s*,")
    for group in target.groups:
        for src in group.sources:
            path = Path(src) if PurePosixPath(src).is_absolute() else source_root / src
            try:
                if path.is_file() and not path.is_symlink():
                    with path.open("rb") as fh:
                        text = fh.read(_INIT_READ_LIMIT).decode("utf-8", "replace")
                    if init.search(text):
                        return True
            except OSError:
                continue
    return False


def ninja_arch_flags(build_ninja: str) -> dict[str, tuple[str, ...]]:
    """Per compiled source (its path as the edge names it), the arch flags in the `FLAGS` of
    its edge in a CMake-generated build.ninja: what nvcc really gets, including the
    `--generate-code` CMake derives from a CUDA_ARCHITECTURES property (which the File API's
    compile fragments leave out)."""
    found: dict[str, tuple[str, ...]] = {}
    source = ""
    for line in build_ninja.splitlines():
        if line.startswith("build "):
            head = line.split("||", 1)[0].split(":", 1)
            inputs = head[1].split()[1:] if len(head) == 2 else []
            source = inputs[0].replace("$:", ":") if inputs else ""
        elif source and line.startswith("  FLAGS = "):
            try:
                tokens = shlex.split(line.removeprefix("  FLAGS = "))
            except ValueError:
                tokens = line.split()
            arch = tuple(split_arch_flags(tokens)[1])
            if arch:
                found[source] = arch
        elif not line.startswith(" "):
            source = ""
    return found


def from_cmake(reply: Reply, root: Path, *, python_suffix: str, notes: tuple[str, ...] = (),
               arch_variable: ArchVariable | None = None, seconds: float = 0.0,
               ninja_flags: dict[str, tuple[str, ...]] | None = None) -> TreeModel:
    """The model of a File API reply. `python_suffix` (EXT_SUFFIX) tells a Python module built
    as a SHARED library (`add_library(x SHARED)` + a suffix) from a plugin. `ninja_flags`
    (`ninja_arch_flags` of the generated build.ninja) gives each source the arch flags nvcc
    really gets."""
    source_root = reply.source_dir if reply.source_dir.as_posix() else root
    targets: list[BuildTarget] = []
    for t in reply.targets:
        if t.type in ("UTILITY", "INTERFACE_LIBRARY"):
            continue
        artifact = PurePosixPath(t.artifacts[0].replace("\\", "/")).name if t.artifacts else ""
        kind = _KINDS.get(t.type, "other")
        if kind == "plugin" and ((python_suffix and artifact.endswith(python_suffix)) or
                                 _defines_module(t, source_root, artifact.split(".")[0])):
            kind = "module"
        units: list[SourceUnit] = []
        for g in t.groups:
            flags, arch, origin = split_fragments(g.fragments)
            where = str(t.defined_at) if t.defined_at else ""
            for src in g.sources:
                absolute = str(source_root / src) if not PurePosixPath(src).is_absolute() \
                    else src
                real = (ninja_flags or {}).get(absolute, ())
                if real and set(real) != set(arch):
                    told = f"build.ninja (CUDA_ARCHITECTURES of {t.name})"
                elif arch and not origin:
                    # A fragment with no backtrace is CMake's own: the target's
                    # CUDA_ARCHITECTURES (or CMAKE_CUDA_ARCHITECTURES) turned into flags.
                    told = f"CUDA_ARCHITECTURES of {t.name}"
                else:
                    told = origin or where
                units.append(SourceUnit(
                    path=relative(absolute, root), language=g.language,
                    includes=tuple(relative(i.value, root) for i in g.includes),
                    defines=tuple(d.value for d in g.defines), flags=tuple(flags),
                    arch_flags=real or tuple(arch), origin=told))
        targets.append(BuildTarget(
            name=t.name, kind=kind, artifact=artifact, sources=tuple(units),
            defined_at=str(t.defined_at) if t.defined_at else t.source_dir))
    cache = tuple((e.name, e.value) for e in reply.cache
                  if e.type not in ("INTERNAL", "STATIC") and not e.name.startswith(
                      ("CMAKE_", "_")) and "_DIR" not in e.name)
    return TreeModel(system="cmake", via="CMake File API (codemodel-v2, cache-v2)",
                     targets=tuple(targets), arch_variable=arch_variable, cache=cache,
                     notes=notes, seconds=seconds)


def from_record(record: SetupRecord, root: Path, copy: Path, *,
                seconds: float = 0.0) -> TreeModel:
    """The model of a setup.py record that ran in `copy` (a copy of `root`): paths are
    mapped back to the tree."""
    by_source = {PurePosixPath(c.source).as_posix(): c for c in record.commands}
    targets: list[BuildTarget] = []
    for ext in record.extensions:
        units: list[SourceUnit] = []
        for src in ext.sources:
            absolute = (copy / src).as_posix() if not PurePosixPath(src).is_absolute() else src
            cmd = by_source.get(PurePosixPath(absolute).as_posix())
            rel = relative(absolute, copy)
            if cmd is None:
                language = "CUDA" if src.endswith(".cu") else "CXX"
                units.append(SourceUnit(path=rel, language=language, includes=(), defines=(),
                                        flags=(), arch_flags=(), origin="setup.py (no command)"))
                continue
            units.append(SourceUnit(
                path=rel, language=cmd.language,
                includes=tuple(relative(i, copy) for i in cmd.includes), defines=cmd.defines,
                flags=cmd.flags, arch_flags=cmd.arch_flags,
                origin="torch's build.ninja (ninja -t compdb)"))
        targets.append(BuildTarget(name=ext.name, kind="module", artifact="",
                                   sources=tuple(units), defined_at=f"setup.py `{ext.name}`"))
    notes: list[str] = []
    if record.torch_presented is not None:
        was, now = record.torch_presented
        notes.append(f"torch {was} is a CPU-only build: setup.py was shown it as {now}, the "
                     "CUDA torch a build needs")
    if record.replaced_arch_flags:
        notes.append("the build hook replaces the setup.py's own arch flags ("
                     + " ".join(record.replaced_arch_flags[:4])
                     + (" …" if len(record.replaced_arch_flags) > 4 else "")
                     + ") with --arch's")
    return TreeModel(system="setuptools", via="setup.py record mode", targets=tuple(targets),
                     env_reads=record.env_reads, argv_options=record.argv_options,
                     network=record.network,
                     exception=record.exception, notes=tuple(notes), seconds=seconds)


def cmake_arch_candidates(texts: dict[str, str]) -> list[str]:
    """Variables a CMakeLists builds its arch flags from (`-gencode=arch=compute_${GPU_ARCH}`,
    `CUDA_ARCHITECTURES "${GPU_ARCH}a"`), most used first: the ones worth confirming by a
    configure. `texts`: file -> CMake text."""
    counts: dict[str, int] = {}
    for text in texts.values():
        for line in text.splitlines():
            if not re.search(r"compute_|sm_|CUDA_ARCHITECTURES|gencode", line):
                continue
            # `list(TRANSFORM CAPS APPEND "-real" OUTPUT_VARIABLE CMAKE_CUDA_ARCHITECTURES)`
            # (bitsandbytes): a list operation names its input list bare.
            bare = re.findall(r"\blist\s*\(\s*\w+\s+(\w+)", line) \
                if "CUDA_ARCHITECTURES" in line else []
            for name in [*re.findall(r"\$\{(\w+)\}", line), *bare]:
                if not name.startswith(("CMAKE_", "_")):
                    counts[name] = counts.get(name, 0) + 1
    return sorted(counts, key=lambda n: (-counts[n], n))


#: `PYBIND11_MODULE(name, var)` / `NB_MODULE(name, var)` in the bindings' own text.
MODULE_MACRO = re.compile(r"\b(?:PYBIND11_MODULE|NB_MODULE)\s*\(\s*(\w+)\s*,\s*(\w+)")


def registered_names(preprocessed: str, source_name: str, var: str) -> tuple[str, ...]:
    """`var.def("name", …)` calls in the lines of `preprocessed` that come from the file
    named `source_name` (the `# N "file"` markers say which file each line is from): the
    names the bindings register in this configuration, `#if`-excluded ones gone."""
    own: list[str] = []
    mine = False
    for line in preprocessed.splitlines():
        marker = re.match(r'#\s*\d+\s+"([^"]*)"', line)
        if marker:
            mine = PurePosixPath(marker[1].replace("\\", "/")).name == source_name
            continue
        if mine:
            own.append(line)
    text = _without_torch_libraries("\n".join(own))
    names = re.findall(rf"\b{re.escape(var)}\s*\.\s*def\s*\(\s*\"(\w+)\"", text)
    return tuple(dict.fromkeys(names))


#: The function a `TORCH_LIBRARY(ns, m)` / `TORCH_LIBRARY_FRAGMENT(ns, m)` block expands to:
#: its `m.def("name", …)` calls register operators (`torch.ops.ns.name`), not attributes of
#: the Python module (detectron2's vision.cpp names its var `m` in both blocks).
_TORCH_LIBRARY_BODY = re.compile(
    r"\bTORCH_LIBRARY(?:_FRAGMENT)?_init_\w+\s*\(\s*(?:::)?torch\s*::\s*Library\s*&\s*\(?\w+\)?"
    r"\s*\)\s*\{")


def _without_torch_libraries(text: str) -> str:
    """`text` less the bodies of its TORCH_LIBRARY blocks (brace-matched, braces inside string
    and character literals skipped; a body left open runs to the end)."""
    out: list[str] = []
    pos = 0
    for m in _TORCH_LIBRARY_BODY.finditer(text):
        if m.start() < pos:
            continue
        out.append(text[pos:m.start()])
        depth, i, quote = 1, m.end(), ""
        while i < len(text) and depth:
            ch = text[i]
            if quote:
                if ch == "\\":
                    i += 1  # the escaped character, a quote included
                elif ch == quote:
                    quote = ""
            elif ch in "\"'":
                quote = ch
            else:
                depth += {"{": 1, "}": -1}.get(ch, 0)
            i += 1
        pos = i
    out.append(text[pos:])
    return "".join(out)


#: How a JitSite names `torch.utils.cpp_extension.load` (the one `[build] jit` builds ahead of
#: time).
CPP_EXTENSION_LOAD = "torch.utils.cpp_extension.load"
_JIT_CALLS = {"load": CPP_EXTENSION_LOAD,
              "load_inline": "torch.utils.cpp_extension.load_inline",
              "nvrtcCreateProgram": "nvrtcCreateProgram", "RawKernel": "RawKernel",
              "RawModule": "RawModule", "SourceModule": "pycuda SourceModule"}
#: Calls that start a program with an argv list (the tree running nvcc itself).
_SPAWNS = frozenset({"run", "call", "check_call", "check_output", "Popen", "spawn"})


#: nvcc options that ask nvcc something instead of compiling (`nvcc --version` to read the
#: CUDA release is no run-time compile).
_NVCC_QUERIES = frozenset({"--version", "-V", "--help", "-h", "--list-gpu-arch",
                           "--list-gpu-code", "-arch-ls", "-code-ls"})


def find_jit(root: Path, python_files: list[str]) -> tuple[JitSite, ...]:
    """Calls that compile CUDA code at run time in the tree's Python: cpp_extension's `load` /
    `load_inline` (imported from torch.utils.cpp_extension), NVRTC, CuPy's RawKernel /
    RawModule, pycuda's SourceModule, and `nvcc` started by the tree itself: a subprocess
    call whose argv (a list, or a name assigned one in the same function) starts with nvcc —
    the string, or an expression that names it (`get_nvcc_compiler()[0]`, DeepGEMM's JIT)."""
    sites: list[JitSite] = []
    for rel in python_files:
        path = root / rel
        if path.is_symlink() or not path.is_file():
            continue  # a FIFO or device would block the read; a link may lead out of the tree
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if not re.search(r"cpp_extension|nvrtc|RawKernel|RawModule|SourceModule|nvcc", text,
                         re.IGNORECASE):
            continue
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError):
            continue
        from_cpp_ext = "cpp_extension" in text
        for scope, node in _calls_by_scope(tree):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else \
                func.id if isinstance(func, ast.Name) else ""
            how = _JIT_CALLS.get(name)
            if how is not None and name in ("load", "load_inline") and not from_cpp_ext:
                how = None  # a `load` of something else (json.load, torch.load)
            argv = _argv_list(node, scope) if how is None and (
                name in _SPAWNS or not isinstance(func, ast.Attribute)) else None
            if argv is not None and _starts_nvcc(argv, text):
                how = "nvcc"
            if how is None:
                continue
            segment = ast.get_source_segment(text, node) or ""
            if how == "nvcc" and argv is not None:
                segment += " " + " ".join(ast.get_source_segment(text, e) or "" for e in argv)
            sites.append(JitSite(where=f"{rel}:{node.lineno}", how=how,
                                 arch_flags=tuple(dict.fromkeys(arch_text(segment)))))
    return tuple(sites)


def _calls_by_scope(tree: Any) -> list[tuple[dict[str, Any], Any]]:
    """Every call with the list/tuple literals assigned to plain names in its function (or
    the module, for module-level code), the last assignment winning."""
    out: list[tuple[dict[str, Any], Any]] = []
    scopes: list[Any] = [tree, *(n for n in ast.walk(tree)
                                 if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))]
    for scope in scopes:
        lists: dict[str, Any] = {}
        calls: list[Any] = []
        todo = list(ast.iter_child_nodes(scope))
        while todo:
            node = todo.pop(0)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda |
                          ast.ClassDef) and scope is not node:
                if isinstance(node, ast.ClassDef):
                    todo.extend(n for n in node.body
                                if not isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))
                continue  # its own scope
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                    isinstance(node.targets[0], ast.Name) and \
                    isinstance(node.value, ast.List | ast.Tuple):
                lists[node.targets[0].id] = node.value
            if isinstance(node, ast.Call):
                calls.append(node)
            todo.extend(ast.iter_child_nodes(node))
        out += [(lists, c) for c in calls]
    return out


def _argv_list(call: Any, scope: dict[str, Any]) -> list[Any] | None:
    """The argv list a spawning call is given: a list/tuple literal, or a name the scope
    assigned one to."""
    if not call.args:
        return None
    first = call.args[0]
    if isinstance(first, ast.Name):
        first = scope.get(first.id, first)
    return list(first.elts) if isinstance(first, ast.List | ast.Tuple) else None


def _starts_nvcc(argv: list[Any], text: str) -> bool:
    """Whether an argv runs nvcc to compile: its first element is `nvcc` (a path ending in
    it) or an expression that names it; no element asks nvcc a question (`--version`)."""
    if not argv:
        return False
    first = argv[0]
    words = {e.value for e in argv if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    if words & _NVCC_QUERIES:
        return False
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return PurePosixPath(first.value.replace("\\", "/")).name in ("nvcc", "nvcc.exe")
    if isinstance(first, ast.Starred):
        return False
    return "nvcc" in (ast.get_source_segment(text, first) or "").lower()


# --- stored models (the introspection cache) -------------------------------------------------

def model_to_json(model: TreeModel) -> dict[str, object]:
    """The model as plain JSON data (`model_from_json` reads it back)."""
    return dataclasses.asdict(model)


def model_from_json(data: object) -> TreeModel:
    """A model from `model_to_json`'s data; ValueError when it does not have that shape."""
    value = _typed(TreeModel, data)
    assert isinstance(value, TreeModel)
    return value


def _typed(hint: object, data: object) -> object:  # noqa: PLR0911 - one return per shape
    """`data` (JSON) as a value of type `hint`: the model's frozen dataclasses, tuples,
    optionals, literals and scalars."""
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if not isinstance(data, dict):
            raise ValueError(f"{hint.__name__}: expected an object")
        hints = typing.get_type_hints(hint, globalns=_hint_names())
        kwargs = {f.name: _typed(hints[f.name], data[f.name])
                  for f in dataclasses.fields(hint) if f.name in data}
        return hint(**kwargs)
    if origin is tuple:
        args = typing.get_args(hint)
        if not isinstance(data, list):
            raise ValueError("expected a list")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_typed(args[0], item) for item in data)
        return tuple(_typed(a, item) for a, item in zip(args, data, strict=True))
    if origin in (typing.Union, types.UnionType):
        if data is None and type(None) in typing.get_args(hint):
            return None
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        return _typed(inner[0], data)
    if origin is typing.Literal:
        if data not in typing.get_args(hint):
            raise ValueError(f"{data!r} is not one of {typing.get_args(hint)}")
        return data
    if hint in (str, int, float, bool):
        if not isinstance(data, hint):
            if hint is float and isinstance(data, int):
                return float(data)
            raise ValueError(f"expected {hint}, got {type(data).__name__}")
        return data
    raise ValueError(f"cannot read {hint!r}")


def _hint_names() -> dict[str, object]:
    return {**globals(), "EnvRead": setup_record.EnvRead,
            "NetworkCall": setup_record.NetworkCall, "RaisedError": setup_record.RaisedError}
