"""What a `setup.py` builds, read with `ast` and never executed.

A small abstract interpreter walks the module the way Python would run it for one target
(platform + archs): assignments, `+=`, `.append/.extend/.remove`, local helper functions,
`os.path.join`/`Path /`, `glob.glob` against the tree's files, list comprehensions, `if`
tests. A value it cannot know (an env switch, `torch.cuda.is_available()`, the nvcc version)
is *unknown*; an `if` on an unknown test runs both branches on copies and merges them, so a
source list is what the build *may* compile. Three tests are decided on purpose:

* platform tests (`sys.platform`, `os.name`, `platform.system()`, `IS_WINDOWS`-style names
  that are assigned from them) follow the target platform;
* a test that names another accelerator stack — ROCm/HIP (`IS_ROCM`, `torch.version.hip`,
  `BUILD_TARGET == "rocm"`), Ascend NPU, Cambricon MLU, Apple MPS, Intel XPU/SYCL, DIOPI,
  MUSA, Habana HPU (`FORCE_NPU`, `torch.is_mlu_available()`, `torch.backends.mps`) — is
  false, and `!=` one of them true: flashbuild builds CUDA;
* an arch flag whose value is unknown and whose name carries an SM number (`HAS_SM90`,
  `ENABLE_SM120`) is true exactly when the target is that SM — the idiom of trees that
  build one extension per arch (SageAttention's `_qattn_sm90` only `if HAS_SM90`).

The result (`SetupPy`) is plain typed data the scan's reachability, its setup.py rules, and
recipe init use, and that a setuptools build backend can reuse.
"""

from __future__ import annotations

import ast
import copy
import fnmatch
import posixpath
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from flashbuild.source.nvccflags import pins_arch

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from flashbuild.arch import Arch

Built = Literal["yes", "maybe", "no"]


class _Unknown:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __deepcopy__(self, memo: dict[int, Any]) -> _Unknown:
        return self


UNKNOWN: Any = _Unknown()
_MAX_DEPTH = 6
_SM_FLAG = re.compile(r"(?:^|_)SM_?(\d{2,3})(?:[AF])?(?:$|_)", re.IGNORECASE)
#: Words (identifier parts) that name an accelerator stack other than CUDA.
_OTHER_STACKS = frozenset({"rocm", "hip", "hipify", "hipcc", "npu", "mlu", "mps", "xpu",
                           "sycl", "dipu", "diopi", "musa", "hpu", "habana", "ascend", "cncc",
                           "ipex", "oneapi"})
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
#: Names of switches that turn something off when set.
_OFF_SWITCH = re.compile(r"(?:^|_)(?:DISABLE|DISABLED|SKIP|NO|WITHOUT|EXCLUDE)(?:_|$)",
                         re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class Extension:
    """One `Extension`/`CUDAExtension`/`CppExtension` call as the build would make it."""

    name: str
    """The module name (`pkg._C`); "" when not a literal."""
    kind: str
    """The constructor as written: `CUDAExtension`, `CppExtension`, `Extension`."""
    line: int
    sources: tuple[str, ...]
    """Tree-relative, forward slashes; globs expanded against the tree."""
    sources_complete: bool
    """False when part of the list could not be read (then reachability assumes more)."""
    include_dirs: tuple[str, ...]
    nvcc_flags: tuple[str, ...]
    """The literal flags (unknown parts, such as an env switch, are left out)."""
    cxx_flags: tuple[str, ...]
    define_macros: tuple[str, ...]
    built: Built
    """For the target: `yes` certainly built, `maybe` behind a test the scan cannot decide,
    `no` behind a test that is false for the target."""
    condition: str
    """The `if` tests around the call, as written (`HAS_SM90`); "" when unconditional."""
    nvcc_line: int = 0
    """Where the nvcc flag list is assigned (evidence for flag rules); 0 when unknown."""

    @property
    def cuda(self) -> bool:
        return self.kind == "CUDAExtension" or any(s.endswith(".cu") for s in self.sources)


@dataclass(frozen=True, kw_only=True)
class SetupPy:
    path: str
    extensions: tuple[Extension, ...]
    uses_cpp_extension: bool
    """Imports torch.utils.cpp_extension (BuildExtension + CUDAExtension)."""
    gencode: tuple[tuple[int, str], ...]
    """Hard-coded gencode/arch flags (line, literal): torch then ignores TORCH_CUDA_ARCH_LIST."""
    env_switches: tuple[tuple[str, int], ...]
    """Environment variables read through os.environ / os.getenv (name, first line), in code
    the target's build may run (not in a ROCm-only branch)."""
    packages: tuple[str, ...]
    """Python packages `setup()` ships (find_packages evaluated on the tree), dotted."""
    package_dir: tuple[tuple[str, str], ...]
    downloads: tuple[tuple[int, str], ...]
    """Lines that fetch during the build: urlopen/urlretrieve/requests, `git clone`."""
    windows_flags: tuple[tuple[int, str, str], ...]
    """Flags added only on Windows (line, flag, the test that gates them)."""

    def built_for_target(self) -> tuple[Extension, ...]:
        return tuple(e for e in self.extensions if e.built != "no")


# --- the interpreter ----------------------------------------------------------------------

class _Return(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


@dataclass
class _Env:
    names: dict[str, Any]
    parent: _Env | None = None

    def get(self, name: str) -> Any:
        env: _Env | None = self
        while env is not None:
            if name in env.names:
                return env.names[name]
            env = env.parent
        return UNKNOWN

    def has(self, name: str) -> bool:
        env: _Env | None = self
        while env is not None:
            if name in env.names:
                return True
            env = env.parent
        return False


@dataclass
class _Ext:
    """An extension call being recorded (mutable until the walk ends)."""

    node: ast.Call
    kind: str
    args: dict[str, Any]
    built: Built
    condition: list[str]


@dataclass
class _Interp:
    platform: str
    archs: Sequence[Arch]
    files: Sequence[str]
    dirs: frozenset[str]
    known: frozenset[str] = frozenset()
    """`files` as a set (find_packages asks whether folders hold an __init__.py)."""
    funcs: dict[str, ast.FunctionDef] = field(default_factory=dict)
    exts: list[_Ext] = field(default_factory=list)
    conds: list[tuple[str, bool | None]] = field(default_factory=list)
    env_reads: dict[str, int] = field(default_factory=dict)
    setup_kwargs: dict[str, Any] = field(default_factory=dict)
    depth: int = 0
    dead: bool = False
    windows_flags: list[tuple[int, str, str]] = field(default_factory=list)
    returns: list[list[Any]] = field(default_factory=list)
    """Per local call being run: values returned under undecidable tests."""

    # --- statements --------------------------------------------------------------------
    def run(self, body: Iterable[ast.stmt], env: _Env) -> None:
        for stmt in body:
            self.stmt(stmt, env)

    def stmt(self, node: ast.stmt, env: _Env) -> None:  # noqa: PLR0912 - one branch per kind
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            self.funcs[node.name] = node  # type: ignore[assignment]
        elif isinstance(node, ast.Assign):
            value = self.expr(node.value, env)
            for target in node.targets:
                self.assign(target, value, env)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            self.assign(node.target, self.expr(node.value, env), env)
        elif isinstance(node, ast.AugAssign):
            current = self.expr(node.target, env)
            value = self.expr(node.value, env)
            if isinstance(node.op, ast.Add) and isinstance(current, list):
                if isinstance(value, list):
                    current.extend(value)
                else:
                    current.append(UNKNOWN)
                self._note_windows(node, value)
            else:
                self.assign(node.target, _binop(node.op, current, value), env)
        elif isinstance(node, ast.Expr):
            self.expr(node.value, env)
        elif isinstance(node, ast.If):
            self.branch(node.test, node.body, node.orelse, env)
        elif isinstance(node, ast.For):
            items = self.expr(node.iter, env)
            if isinstance(items, list) and len(items) <= 64:
                for item in items:
                    self.assign(node.target, item, env)
                    self.run(node.body, env)
            else:
                self.assign(node.target, UNKNOWN, env)
                self.maybe(node.body, [], env, "for loop over an unknown list")
        elif isinstance(node, ast.While):
            self.maybe(node.body, [], env, "while loop")
        elif isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                if item.optional_vars is not None:
                    self.assign(item.optional_vars, UNKNOWN, env)
            self.run(node.body, env)
        elif isinstance(node, ast.Try):
            self.run(node.body, env)
            self.run(node.orelse, env)
            self.run(node.finalbody, env)
        elif isinstance(node, ast.Return):
            raise _Return(self.expr(node.value, env) if node.value is not None else None)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            pass  # names resolve through the parent chain already
        elif isinstance(node, ast.ImportFrom) and node.module == "torch.utils.cpp_extension":
            # torch's own platform constants (`if IS_WINDOWS:` picks the cl.exe flags).
            known = {"IS_WINDOWS": self.platform == "windows",
                     "IS_LINUX": self.platform == "linux", "IS_MACOS": False}
            for alias in node.names:
                if alias.name in known:
                    env.names[alias.asname or alias.name] = known[alias.name]

    def assign(self, target: ast.expr, value: Any, env: _Env) -> None:
        if isinstance(target, ast.Name):
            env.names[target.id] = value
        elif isinstance(target, ast.Tuple | ast.List):
            parts = value if isinstance(value, list | tuple) and \
                len(value) == len(target.elts) else [UNKNOWN] * len(target.elts)
            for t, v in zip(target.elts, parts, strict=True):
                self.assign(t, v, env)
        elif isinstance(target, ast.Subscript):
            container = self.expr(target.value, env)
            key = self.expr(target.slice, env)
            if isinstance(container, dict) and isinstance(key, str):
                container[key] = value

    def branch(self, test: ast.expr, body: list[ast.stmt], orelse: list[ast.stmt],
               env: _Env) -> None:
        verdict = self.truth(test, env)
        text = ast.unparse(test)
        if verdict is True:
            self.with_cond(text, True, body, env)
        elif verdict is False:
            self.dead_run(text, body, env)
            self.with_cond(f"not ({text})", True, orelse, env)
        else:
            self.maybe(body, orelse, env, text)

    def with_cond(self, text: str, value: bool | None, body: list[ast.stmt], env: _Env) -> None:
        self.conds.append((text, value))
        try:
            self.run(body, env)
        finally:
            self.conds.pop()

    def dead_run(self, text: str, body: list[ast.stmt], env: _Env) -> None:
        """Walk a branch that is false for the target on a throw-away copy, so the extensions
        it would build are known (reported as not built) without changing any value."""
        if not body:
            return
        was = self.dead
        self.dead = True
        try:
            self.with_cond(text, False, body, _copy_env(env))
        except _Return:
            pass
        finally:
            self.dead = was

    def maybe(self, body: list[ast.stmt], orelse: list[ast.stmt], env: _Env, text: str) -> None:
        """An undecidable test: run each branch on a copy, then merge. A value that differs
        between the branches is unknown; lists are united (the build *may* use each item)."""
        results = []
        for part, label in ((body, text), (orelse, f"not ({text})")):
            scratch = _copy_env(env)
            try:
                self.with_cond(label, None, part, scratch)
            except _Return as ret:
                if self.returns:
                    self.returns[-1].append(ret.value)
            results.append(scratch)
        _merge_into(env, results[0], results[1])

    # --- expressions -------------------------------------------------------------------
    def expr(self, node: ast.expr | None, env: _Env) -> Any:  # noqa: PLR0911, PLR0912
        if node is None:
            return UNKNOWN
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                val = self.expr(v.value, env) if isinstance(v, ast.FormattedValue) else \
                    self.expr(v, env)
                if not isinstance(val, str | int):
                    return UNKNOWN
                parts.append(str(val))
            return "".join(parts)
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            out: list[Any] = []
            for elt in node.elts:
                if isinstance(elt, ast.Starred):
                    inner = self.expr(elt.value, env)
                    out.extend(inner if isinstance(inner, list) else [UNKNOWN])
                else:
                    out.append(self.expr(elt, env))
            return out
        if isinstance(node, ast.Dict):
            d: dict[Any, Any] = {}
            for k, v in zip(node.keys, node.values, strict=True):
                if k is not None:
                    d[self.expr(k, env)] = self.expr(v, env)
            return d
        if isinstance(node, ast.Name):
            if node.id == "__file__":
                return "setup.py"
            if not env.has(node.id) and node.id.endswith("Extension"):
                return node.id  # an imported extension class, kept by name
            return env.get(node.id)
        if isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if dotted == "sys.platform":
                return "win32" if self.platform == "windows" else "linux"
            if dotted == "os.name":
                return "nt" if self.platform == "windows" else "posix"
            if dotted == "os.sep":
                return "/"
            return UNKNOWN
        if isinstance(node, ast.BinOp):
            return _binop(node.op, self.expr(node.left, env), self.expr(node.right, env))
        if isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.Not):
            v = self.expr(node.operand, env)
            if isinstance(v, int) and isinstance(node.op, ast.USub):
                return -v
            return UNKNOWN
        if isinstance(node, ast.BoolOp | ast.Compare | ast.UnaryOp):
            t = self.truth(node, env)
            return UNKNOWN if t is None else t
        if isinstance(node, ast.IfExp):
            t = self.truth(node.test, env)
            if t is None:
                a, b = self.expr(node.body, env), self.expr(node.orelse, env)
                return a if a == b else UNKNOWN
            return self.expr(node.body if t else node.orelse, env)
        if isinstance(node, ast.Subscript):
            container = self.expr(node.value, env)
            key = self.expr(node.slice, env)
            if isinstance(container, dict) and not isinstance(key, _Unknown):
                return container.get(key, UNKNOWN)
            if isinstance(container, list | str) and isinstance(key, int):
                try:
                    return container[key]
                except IndexError:
                    return UNKNOWN
            self._env_read(node)
            return UNKNOWN
        if isinstance(node, ast.ListComp | ast.GeneratorExp | ast.SetComp):
            return self.comprehension(node, env)
        if isinstance(node, ast.Call):
            return self.call(node, env)
        return UNKNOWN

    def comprehension(self, node: ast.ListComp | ast.GeneratorExp | ast.SetComp,
                      env: _Env) -> Any:
        if len(node.generators) != 1:
            return UNKNOWN
        gen = node.generators[0]
        items = self.expr(gen.iter, env)
        if not isinstance(items, list):
            return UNKNOWN
        out = []
        inner = _Env({}, env)
        for item in items:
            self.assign(gen.target, item, inner)
            if any(self.truth(test, inner) is False for test in gen.ifs):
                continue
            out.append(self.expr(node.elt, inner))
        return out

    def call(self, node: ast.Call, env: _Env) -> Any:  # noqa: PLR0911, PLR0912
        func = node.func
        name = _dotted(func)
        last = name.rpartition(".")[2]
        if name in ("os.getenv", "os.environ.get") or (last == "get" and
                                                       name.endswith("environ.get")):
            self._env_read(node)
            return UNKNOWN
        if name in ("os.path.join", "posixpath.join"):
            parts = [self.expr(a, env) for a in node.args]
            if not all(isinstance(p, str) for p in parts):
                return UNKNOWN
            return self.rooted_join(parts)
        if name in ("os.path.dirname",):
            arg = self.expr(node.args[0], env) if node.args else UNKNOWN
            return posixpath.dirname(arg) if isinstance(arg, str) else UNKNOWN
        if name in ("os.path.abspath", "os.path.realpath", "os.path.normpath", "str",
                    "os.fspath", "Path", "pathlib.Path"):
            parts = [self.expr(a, env) for a in node.args]
            if not parts:
                return ""
            return _join(*parts) if all(isinstance(p, str) for p in parts) else UNKNOWN
        if name in ("glob.glob", "glob", "glob.iglob"):
            pattern = self.expr(node.args[0], env) if node.args else UNKNOWN
            recursive = any(k.arg == "recursive" and self.truth(k.value, env) is True
                            for k in node.keywords)
            return self.glob(pattern, recursive=recursive) if isinstance(pattern, str) \
                else UNKNOWN
        if name in ("list", "sorted", "set", "tuple", "frozenset"):
            arg = self.expr(node.args[0], env) if node.args else []
            return list(dict.fromkeys(arg)) if name in ("set", "frozenset") and \
                isinstance(arg, list) else (list(arg) if isinstance(arg, list) else UNKNOWN)
        if name in ("platform.system",):
            return "Windows" if self.platform == "windows" else "Linux"
        if name in ("find_packages", "setuptools.find_packages", "find_namespace_packages"):
            return self.find_packages(node, env)
        bound = env.get(last) if isinstance(func, ast.Name) else UNKNOWN
        if isinstance(bound, str) and bound.endswith("Extension"):
            # `ext = CUDAExtension; ext(...)` (xformers) names the class through a variable.
            return self.extension(node, bound, env)
        if last.lower().endswith("extension") and not last.lower().startswith("build"):
            return self.extension(node, last, env)
        if name in ("setup", "setuptools.setup"):
            for kw in node.keywords:
                if kw.arg:
                    self.setup_kwargs[kw.arg] = self.expr(kw.value, env)
            return None
        if isinstance(func, ast.Attribute):
            owner = self.expr(func.value, env)
            args = [self.expr(a, env) for a in node.args]
            return self.method(owner, func.attr, args, node)
        if isinstance(func, ast.Name) and func.id in self.funcs:
            return self.local_call(self.funcs[func.id], node, env)
        for a in node.args:
            self.expr(a, env)
        for kw in node.keywords:
            self.expr(kw.value, env)
        return UNKNOWN

    def method(self, owner: Any, attr: str, args: list[Any],  # noqa: PLR0911
               node: ast.Call) -> Any:
        if isinstance(owner, list):
            if attr in ("append", "add") and len(args) == 1:
                owner.append(args[0])
                self._note_windows(node, args[0])
                return None
            if attr in ("extend", "update") and len(args) == 1:
                owner.extend(args[0] if isinstance(args[0], list) else [UNKNOWN])
                self._note_windows(node, args[0])
                return None
            if attr == "remove" and len(args) == 1:
                if args[0] in owner:
                    owner.remove(args[0])
                return None
            if attr == "insert" and len(args) == 2:
                owner.insert(args[0] if isinstance(args[0], int) else 0, args[1])
                return None
            return UNKNOWN
        if isinstance(owner, str) and all(isinstance(a, str | int) for a in args):
            fn = getattr(str, attr, None)
            if attr in ("startswith", "endswith", "lower", "upper", "strip", "replace",
                        "split", "rstrip", "lstrip", "format", "join") and fn is not None:
                try:
                    return fn(owner, *args)
                except (TypeError, ValueError):
                    return UNKNOWN
        if isinstance(owner, dict) and attr == "get" and args:
            return owner.get(args[0], args[1] if len(args) > 1 else None)
        if attr in ("glob", "rglob") and isinstance(owner, str) and args and \
                isinstance(args[0], str):
            pattern = f"{owner}/**/{args[0]}" if attr == "rglob" else f"{owner}/{args[0]}"
            return self.glob(pattern, recursive=True)
        if attr in ("resolve", "absolute") and isinstance(owner, str):
            return owner
        return UNKNOWN

    def local_call(self, fn: ast.FunctionDef, node: ast.Call, env: _Env) -> Any:
        if self.depth >= _MAX_DEPTH:
            return UNKNOWN
        root = env
        while root.parent is not None:
            root = root.parent
        local = _Env({}, root)
        params = [a.arg for a in fn.args.args]
        defaults = fn.args.defaults
        for i, p in enumerate(params):
            di = i - (len(params) - len(defaults))
            local.names[p] = self.expr(defaults[di], env) if di >= 0 else UNKNOWN
        for p, a in zip(params, node.args, strict=False):
            local.names[p] = self.expr(a, env)
        for kw in node.keywords:
            if kw.arg:
                local.names[kw.arg] = self.expr(kw.value, env)
        self.depth += 1
        self.returns.append([])
        try:
            self.run(fn.body, local)
        except _Return as ret:
            return ret.value
        finally:
            self.depth -= 1
            maybe = self.returns.pop()
        # Only returns under undecidable tests: lists are united (what it may return).
        if maybe and all(isinstance(v, list) for v in maybe):
            return list(dict.fromkeys(x for v in maybe for x in _hashable(v)))
        return UNKNOWN if maybe else None

    def extension(self, node: ast.Call, kind: str, env: _Env) -> Any:
        args: dict[str, Any] = {}
        for key, pos in (("name", 0), ("sources", 1)):
            if len(node.args) > pos:
                args[key] = self.expr(node.args[pos], env)
        for kw in node.keywords:
            if kw.arg:
                args[kw.arg] = self.expr(kw.value, env)
                if kw.arg == "extra_compile_args":
                    args["_eca_node"] = kw.value
        values = [v for _t, v in self.conds]
        built: Built = "no" if self.dead or False in values else (
            "maybe" if None in values else "yes")
        self.exts.append(_Ext(node, kind, args, built, [t for t, _v in self.conds]))
        return UNKNOWN

    # --- tests -------------------------------------------------------------------------
    def truth(self, node: ast.expr, env: _Env) -> bool | None:  # noqa: PLR0911
        if isinstance(node, ast.BoolOp):
            vals = [self.truth(v, env) for v in node.values]
            if isinstance(node.op, ast.And):
                if False in vals:
                    return False
                return None if None in vals else True
            if True in vals:
                return True
            return None if None in vals else False
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            v = self.truth(node.operand, env)
            return None if v is None else not v
        if _names_other_stack(node):
            for n in ast.walk(node):  # still record the switches the test reads
                if isinstance(n, ast.Call) and _dotted(n.func) in ("os.getenv",
                                                                   "os.environ.get"):
                    self._env_read(n)
            # A ROCm/NPU/MPS/... branch: flashbuild builds CUDA. `x != "rocm"` holds for it.
            return isinstance(node, ast.Compare) and len(node.ops) == 1 and \
                isinstance(node.ops[0], ast.NotEq | ast.IsNot | ast.NotIn)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left = self.expr(node.left, env)
            right = self.expr(node.comparators[0], env)
            return _compare(node.ops[0], left, right)
        value = self.expr(node, env) if not isinstance(node, ast.Compare) else UNKNOWN
        if isinstance(value, _Unknown):
            return self._arch_flag(node)
        if isinstance(value, list):
            return None if any(isinstance(v, _Unknown) for v in value) and not \
                [v for v in value if not isinstance(v, _Unknown)] else bool(value)
        return bool(value)

    def _arch_flag(self, node: ast.expr) -> bool | None:
        name = _dotted(node) if isinstance(node, ast.Name | ast.Attribute) else ""
        last = name.rpartition(".")[2]
        m = _SM_FLAG.search(last) if name else None
        if m is None:
            return None
        if _OFF_SWITCH.search(last):
            # `DISABLE_SM90` (from the environment, off unless set): a build for sm_90 does
            # not disable sm_90, and one for another arch keeps the default, off. FlashMLA's
            # `if not DISABLE_SM90: gencode += sm_90a` is then read as the union.
            return False
        code = int(m[1])
        return any(a.code == code for a in self.archs)

    # --- helpers -----------------------------------------------------------------------
    def rooted_join(self, parts: list[str]) -> str:
        """`os.path.join`. This reader keeps paths tree-relative, where setup.py had absolute
        ones (`this_dir` from `__file__`): DCNv2's `os.path.join(extensions_dir, s)` over its
        own glob results, absolute at run time, must stay `src/vision.cpp`, which the join
        of tree-relative paths would make `src/src/vision.cpp`. So where the join names
        nothing in the tree and its last part, already under the rest, names a file or
        folder of it, that part is the path (as the absolute path would have won)."""
        joined = _join(*parts)
        last = _norm(parts[-1]) if parts else ""
        head = _join(*parts[:-1])
        if len(parts) > 1 and head and last.startswith(f"{head}/") and \
                joined not in self.files and joined not in self.dirs and \
                (last in self.files or last in self.dirs):
            return last
        return joined

    def glob(self, pattern: str, *, recursive: bool) -> list[str]:
        pat = _norm(pattern)
        if not recursive:
            pat = pat.replace("**", "*")
        rx = _glob_regex(pat)
        pool = self.dirs if pat.endswith("/") else self.files
        return sorted(f for f in pool if rx.match(f))

    def find_packages(self, node: ast.Call, env: _Env) -> Any:
        where = ""
        exclude: list[str] = []
        include: list[str] = []
        for kw in node.keywords:
            val = self.expr(kw.value, env)
            if kw.arg == "where" and isinstance(val, str):
                where = _norm(val)
            elif kw.arg == "exclude" and isinstance(val, list):
                exclude = [v for v in val if isinstance(v, str)]
            elif kw.arg == "include" and isinstance(val, list):
                include = [v for v in val if isinstance(v, str)]
        if node.args:
            val = self.expr(node.args[0], env)
            if isinstance(val, str):
                where = _norm(val)
        prefix = f"{where}/" if where else ""
        out = []
        for f in self.files:
            if not f.startswith(prefix) or not f.endswith("/__init__.py"):
                continue
            dotted = f[len(prefix):-len("/__init__.py")].replace("/", ".")
            parts = dotted.split(".")
            # find_packages only descends into folders that are packages themselves.
            if any(f"{prefix}{'/'.join(parts[:i])}/__init__.py" not in self.known
                   for i in range(1, len(parts))):
                continue
            if any(fnmatch.fnmatchcase(dotted, p) for p in exclude):
                continue
            if include and not any(fnmatch.fnmatchcase(dotted, p) for p in include):
                continue
            out.append(dotted)
        return sorted(out)

    def _env_read(self, node: ast.expr) -> None:
        if self.dead:
            return  # read only in a branch the target never takes (a ROCm build's switches)
        if isinstance(node, ast.Call) and node.args and \
                isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            self.env_reads.setdefault(node.args[0].value, node.lineno)
        elif isinstance(node, ast.Subscript) and _dotted(node.value) == "os.environ" and \
                isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            self.env_reads.setdefault(node.slice.value, node.lineno)

    def _note_windows(self, node: ast.AST, value: Any) -> None:
        """Remember flags added only under a Windows test (evidence for the flag rules)."""
        win = [t for t, v in self.conds if v is not False and _is_platform_test(t)]
        if not win or self.dead or self.platform != "windows":
            return
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, str):
                self.windows_flags.append((getattr(node, "lineno", 0), item, win[-1]))


# --- small pure helpers ----------------------------------------------------------------------

def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    return ""


def names_other_stack(word: str) -> bool:
    """Whether an identifier (`IS_ROCM`, `is_mlu_available`, `torch_npu`, `HIP_HOME`) names an
    accelerator stack other than CUDA by one of its parts (so `ship` and `chip` do not)."""
    return any(w.lower() in _OTHER_STACKS or w.lower().startswith("rocm")
               for w in _WORDS.findall(word))


def _names_other_stack(node: ast.expr) -> bool:
    """Whether a test is about another accelerator stack: a name, attribute, or a one-word
    string in it (`'is_mlu_available'`, `"rocm"`) says so."""
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and names_other_stack(n.id):
            return True
        if isinstance(n, ast.Attribute) and names_other_stack(n.attr):
            return True
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and \
                re.fullmatch(r"\w+", n.value) and names_other_stack(n.value):
            return True
    return False


def _is_platform_test(text: str) -> bool:
    return bool(re.search(r"win32|\bnt\b|Windows|IS_WINDOWS|_WIN", text))


def _norm(path: str) -> str:
    path = path.replace("\\", "/")
    out = posixpath.normpath(path) if path else ""
    if out == ".":
        return ""
    while out.startswith("./"):
        out = out[2:]
    return out


def _join(*parts: str) -> str:
    joined = ""
    for p in parts:
        if not p:
            continue
        joined = p if p.startswith("/") or not joined else f"{joined}/{p}"
    return _norm(joined)


def _glob_regex(pattern: str) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def _binop(op: ast.operator, a: Any, b: Any) -> Any:  # noqa: PLR0911
    if isinstance(a, _Unknown) or isinstance(b, _Unknown):
        if isinstance(op, ast.Add) and (isinstance(a, list) or isinstance(b, list)):
            return [*(a if isinstance(a, list) else [UNKNOWN]),
                    *(b if isinstance(b, list) else [UNKNOWN])]
        return UNKNOWN
    try:
        if isinstance(op, ast.Add):
            return a + b
        if isinstance(op, ast.Sub) and isinstance(a, list) and isinstance(b, list):
            return [x for x in a if x not in b]
        if isinstance(op, ast.Div) and isinstance(a, str) and isinstance(b, str):
            return _join(a, b)  # pathlib's `/`
        if isinstance(op, ast.Mod) and isinstance(a, str):
            return UNKNOWN
    except TypeError:
        return UNKNOWN
    return UNKNOWN


def _compare(op: ast.cmpop, a: Any, b: Any) -> bool | None:  # noqa: PLR0911
    if isinstance(a, _Unknown) or isinstance(b, _Unknown):
        return None
    try:
        if isinstance(op, ast.Eq):
            return bool(a == b)
        if isinstance(op, ast.NotEq):
            return bool(a != b)
        if isinstance(op, ast.In):
            if isinstance(b, list) and any(isinstance(x, _Unknown) for x in b) and a not in b:
                return None
            return a in b
        if isinstance(op, ast.NotIn):
            if isinstance(b, list) and any(isinstance(x, _Unknown) for x in b) and a not in b:
                return None
            return a not in b
        if isinstance(op, ast.Is):
            return a is b
        if isinstance(op, ast.IsNot):
            return a is not b
    except TypeError:
        return None
    return None


def _copy_env(env: _Env) -> _Env:
    """A deep copy of the innermost scope (outer scopes are shared: writes go to the inner
    one). Aliasing inside the scope survives (one deepcopy memo)."""
    return _Env(copy.deepcopy(env.names), env.parent)


_MISSING: Any = object()


def _merge_into(env: _Env, a: _Env, b: _Env) -> None:
    for name in set(a.names) | set(b.names):
        old = env.names.get(name, _MISSING)
        va = a.names.get(name, old)
        vb = b.names.get(name, old)
        # A list or dict that only one branch creates is what the build *may* use.
        if va is _MISSING:
            va = vb if isinstance(vb, list | dict) else UNKNOWN
        if vb is _MISSING:
            vb = va if isinstance(va, list | dict) else UNKNOWN
        if old is _MISSING:
            old = UNKNOWN
        if isinstance(va, list) and isinstance(vb, list):
            merged = _union(va, vb)
            if isinstance(old, list):
                old[:] = merged  # keep aliases (a dict entry that holds the same list)
                env.names[name] = old
            else:
                env.names[name] = merged
        elif isinstance(va, dict) and isinstance(vb, dict):
            env.names[name] = {**vb, **va} if va == vb else _merge_dicts(va, vb)
        elif isinstance(va, str) and isinstance(vb, str) and va.endswith("Extension") and \
                vb.endswith("Extension"):
            # `ext = CppExtension` / `if cuda: ext = CUDAExtension`: it may build CUDA.
            env.names[name] = "CUDAExtension" if "CUDAExtension" in (va, vb) else va
        else:
            env.names[name] = va if _same(va, vb) else UNKNOWN


def _merge_dicts(a: dict[Any, Any], b: dict[Any, Any]) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for k in set(a) | set(b):
        va, vb = a.get(k, _MISSING), b.get(k, _MISSING)
        va = vb if va is _MISSING else va
        vb = va if vb is _MISSING else vb
        if isinstance(va, list) and isinstance(vb, list):
            out[k] = _union(va, vb)
        else:
            out[k] = va if _same(va, vb) else UNKNOWN
    return out


def _union(a: list[Any], b: list[Any]) -> list[Any]:
    """Both branches' items, in order. When one branch only appended to the other's list the
    longer list is kept as is (so a repeated `-Xcompiler` survives)."""
    if a[:len(b)] == b:
        return a
    if b[:len(a)] == a:
        return b
    return list(dict.fromkeys([*_hashable(a), *_hashable(b)]))


def _hashable(items: list[Any]) -> list[Any]:
    return [x if isinstance(x, str | int | bool | _Unknown) or x is None else UNKNOWN
            for x in items]


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:
        return False


def _strings(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list):
        return tuple(v for v in value if isinstance(v, str))
    return ()


# --- entry point ---------------------------------------------------------------------------

def parse_python(text: str, filename: str) -> ast.Module:
    """`ast.parse`, with the parser's other failures as SyntaxError: an expression nested
    deeper than Python's recursion limit (RecursionError), a NUL byte (ValueError)."""
    try:
        return ast.parse(text, filename=filename)
    except (RecursionError, MemoryError) as exc:
        raise SyntaxError(f"nested too deeply for Python's parser ({type(exc).__name__})",
                          (filename, None, None, None)) from exc
    except ValueError as exc:
        raise SyntaxError(str(exc), (filename, None, None, None)) from exc


def syntax_problem(exc: SyntaxError) -> str:
    """`SyntaxError` as the evidence of a message: `invalid syntax at line 3`."""
    return exc.msg + (f" at line {exc.lineno}" if exc.lineno else "")


def analyze_setup(text: str, path: str, *, platform: str, archs: Sequence[Arch],
                  files: Sequence[str]) -> SetupPy | None:
    """Read `text` (the setup.py at tree-relative `path`) for the target. `files` lists the
    tree's files (tree-relative) for `glob` and `find_packages`. None when it does not parse
    (`read_setup` says why). Paths in the result are tree-relative (a setup.py in a
    sub-folder is resolved there)."""
    try:
        return _analyze(text, path, platform=platform, archs=archs, files=files)
    except SyntaxError:
        return None


def _analyze(text: str, path: str, *, platform: str, archs: Sequence[Arch],
             files: Sequence[str]) -> SetupPy:
    tree = parse_python(text, path)
    base = posixpath.dirname(path)
    local_files = [f[len(base) + 1:] for f in files if f.startswith(f"{base}/")] if base \
        else list(files)
    dirs = frozenset(f"{d}/" for f in local_files for d in _parents(f))
    interp = _Interp(platform=platform, archs=archs, files=local_files, dirs=dirs,
                     known=frozenset(local_files))
    env = _Env({"__name__": "__main__"})
    try:
        interp.run(tree.body, env)
    except _Return:
        pass
    except RecursionError as exc:
        raise SyntaxError("nested too deeply for flashbuild's reader (RecursionError)",
                          (path, None, None, None)) from exc

    def rel(p: str) -> str:
        return _join(base, _norm(p)) if base else _norm(p)

    exts = []
    for e in interp.exts:
        sources_raw = e.args.get("sources", UNKNOWN)
        sources = tuple(rel(s) for s in _strings(sources_raw))
        complete = isinstance(sources_raw, list) and \
            not any(isinstance(s, _Unknown) for s in sources_raw)
        eca = e.args.get("extra_compile_args", UNKNOWN)
        nvcc: tuple[str, ...] = ()
        cxx: tuple[str, ...] = ()
        nvcc_line = 0
        if isinstance(eca, dict):
            nvcc = _strings(eca.get("nvcc", UNKNOWN))
            cxx = _strings(eca.get("cxx", UNKNOWN))
            nvcc_line = _flag_line(tree, e.args.get("_eca_node"), "nvcc")
        elif isinstance(eca, list):
            cxx = _strings(eca)
        if not nvcc_line:
            nvcc_line = e.node.lineno
        macros = e.args.get("define_macros", UNKNOWN)
        defines = tuple(m[0] if isinstance(m, list | tuple) and m and isinstance(m[0], str)
                        else m for m in (macros if isinstance(macros, list) else [])
                        if isinstance(m, str | list | tuple))
        name = e.args.get("name", "")
        exts.append(Extension(
            name=name if isinstance(name, str) else "", kind=e.kind, line=e.node.lineno,
            sources=sources, sources_complete=complete,
            include_dirs=tuple(rel(s) for s in _strings(e.args.get("include_dirs", UNKNOWN))),
            nvcc_flags=nvcc, cxx_flags=cxx,
            define_macros=tuple(d for d in defines if isinstance(d, str)),
            built=e.built, condition=" and ".join(
                f"({c})" if " or " in c and len(e.condition) > 1 else c
                for c in e.condition),
            nvcc_line=nvcc_line))
    packages = _strings(interp.setup_kwargs.get("packages", UNKNOWN))
    pdir = interp.setup_kwargs.get("package_dir", UNKNOWN)
    package_dir = tuple((k, v) for k, v in pdir.items() if isinstance(k, str)
                        and isinstance(v, str)) if isinstance(pdir, dict) else ()
    return SetupPy(
        path=path, extensions=tuple(exts),
        uses_cpp_extension="torch.utils.cpp_extension" in text,
        gencode=tuple(_gencode_literals(tree)),
        env_switches=tuple(sorted(interp.env_reads.items(), key=lambda kv: kv[1])),
        packages=packages, package_dir=package_dir,
        downloads=tuple(_downloads(tree)),
        windows_flags=tuple(interp.windows_flags))


def _flag_line(tree: ast.Module, node: ast.expr | None, key: str, depth: int = 0) -> int:
    """The line where the `key` flag list of `extra_compile_args` is written: through a
    name to its first assignment, into a dict literal's `key` entry."""
    if node is None or depth > 4:
        return 0
    if isinstance(node, ast.Name):
        first = min((a for a in ast.walk(tree) if isinstance(a, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == node.id for t in a.targets)),
            key=lambda a: a.lineno, default=None)
        return _flag_line(tree, first.value, key, depth + 1) or first.lineno if first else 0
    if isinstance(node, ast.Dict):
        for k, v in zip(node.keys, node.values, strict=True):
            if isinstance(k, ast.Constant) and k.value == key:
                return _flag_line(tree, v, key, depth + 1) or v.lineno
        return 0
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Name):
        return _flag_line(tree, node.args[0], key, depth + 1) or node.lineno
    return node.lineno


def _parents(path: str) -> Iterable[str]:
    parts = path.split("/")[:-1]
    for i in range(1, len(parts) + 1):
        yield "/".join(parts[:i])


def _gencode_literals(tree: ast.Module) -> list[tuple[int, str]]:
    """String literals that pin an arch for nvcc (`arch=compute_80,code=sm_80`,
    `-arch=sm_90`). f-strings built from a variable are not hard-coded."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                pins_arch(node.value) and "\n" not in node.value:
            out.append((node.lineno, node.value))
    return sorted(out)


_FETCH = frozenset({"urlopen", "urlretrieve", "download_url_to_file"})


def _downloads(tree: ast.Module) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            last = name.rpartition(".")[2]
            if last in _FETCH or name in ("requests.get", "wget.download"):
                out.append((node.lineno, f"{name}(...)"))
                continue
            words = [n.value for n in ast.walk(node) if isinstance(n, ast.Constant)
                     and isinstance(n.value, str)]
            if ("git" in words and "clone" in words) or \
                    any(w.startswith("git clone") for w in words):
                out.append((node.lineno, "git clone"))
    return sorted(set(out))


def setup_for(root_files: Sequence[str], read: Callable[[str], str | None], *,
              platform: str, archs: Sequence[Arch]) -> SetupPy | None:
    """The top-level setup.py of a tree, analysed; None when there is none (or it builds no
    extension)."""
    return read_setup(root_files, read, platform=platform, archs=archs)[0]


#: What setuptools runs for a tree without a setup.py (setup.cfg, pyproject.toml only).
STAND_IN_SETUP = "from setuptools import setup\nsetup()\n"


def read_setup(root_files: Sequence[str], read: Callable[[str], str | None], *,
               platform: str, archs: Sequence[Arch], unnamed: bool = False,
               jit: bool = False) -> tuple[SetupPy | None, str]:
    """`setup_for`, and why a setup.py that is there could not be read ("" when it was, or
    there is none): a syntax error, nesting too deep to parse. With `unnamed`, also a
    setup.py that uses torch's cpp_extension but names no extension static reading can follow
    (`extension_type(...)`, its class chosen at run time by a GPU check): only running it, in
    record mode, says what it builds. With `jit` (the tree's Python compiles an extension at
    run time, which the build can make ahead of time), any setuptools build: its setup.py,
    else setuptools' own stand-in for a setup.cfg or pyproject.toml tree."""
    text = read("setup.py") if "setup.py" in root_files else None
    if text is None and jit and setuptools_packaged(root_files, read):
        text = STAND_IN_SETUP
    if text is None:
        return None, ""
    key = (text, platform, tuple(archs), tuple(root_files))
    result = _ANALYSED.get(key)
    if result is None:
        try:
            result = _analyze(text, "setup.py", platform=platform, archs=archs,
                              files=root_files)
        except SyntaxError as exc:
            return None, syntax_problem(exc)
        _ANALYSED.clear()  # one tree per run: keep the last analysis only
        _ANALYSED[key] = result
    return (result if result.extensions or (unnamed and result.uses_cpp_extension) or jit
            else None), ""


def setuptools_packaged(root_files: Sequence[str], read: Callable[[str], str | None]) -> bool:
    """Whether setuptools builds the tree: a setup.py or setup.cfg, or a pyproject.toml whose
    build backend is setuptools' (or none: pip's default is setuptools)."""
    if "setup.py" in root_files or "setup.cfg" in root_files:
        return True
    text = read("pyproject.toml") if "pyproject.toml" in root_files else None
    if text is None:
        return False
    backend = re.search(r"^\s*build-backend\s*=\s*[\"']([^\"']+)", text, re.MULTILINE)
    return backend is None or backend[1].startswith("setuptools.build_meta")


#: The last analysis, by everything it reads (the text, the target, the tree's files): a build
#: asks twice (the zero-config draft's submodule check, then the build's own), and analysing a
#: large setup.py (xformers') costs 0.12 s of a no-op rebuild each time.
_ANALYSED: dict[tuple[str, str, tuple[Arch, ...], tuple[str, ...]], SetupPy] = {}


#: PEP 517 backends that build no compiled code of their own (a tree built by one of them
#: compiles C/C++ only at run time, if at all). setuptools is here too: its extensions are
#: named in setup.py or in pyproject's `ext-modules`, which `builds_nothing` looks for.
_PURE_BACKENDS = frozenset({"setuptools.build_meta", "setuptools.build_meta:__legacy__",
                            "hatchling.build", "flit_core.buildapi", "poetry.core.masonry.api",
                            "pdm.backend", "pdm.pep517.api"})
#: Words in a setup.py (or pyproject.toml) that say it may build compiled code.
_BUILDS_CODE = re.compile(r"\b(?:ext_modules|ext-modules|Extension|CUDAExtension|CppExtension|"
                          r"build_ext|cmdclass|distclass|cmake|CMake|Pybind11Extension|"
                          r"cythonize|cffi_modules|rust_extensions|libraries)\b")


def builds_nothing(root_files: Sequence[str], read: Callable[[str], str | None]) -> str:
    """Why the tree's own build compiles no C/C++ ("" when it may, or cannot be told): a
    top-level setup.py that names no extension, build_ext, cmdclass or library at all, or,
    without setup.py, a pyproject.toml whose build backend builds pure-Python wheels and that
    declares no `ext-modules`. Read as text, statically; no CMakeLists.txt at the top."""
    files = frozenset(root_files)
    if "CMakeLists.txt" in files or "meson.build" in files:
        return ""
    if "setup.py" in files:
        text = read("setup.py")
        names = _code_only(text) if text is not None else None
        if names is None or _BUILDS_CODE.search(names):
            return ""
        return "setup.py names no extension module, build_ext or cmdclass"
    if "pyproject.toml" not in files:
        return ""
    text = read("pyproject.toml") or ""
    m = re.search(r'^\s*build-backend\s*=\s*["\']([^"\']+)["\']', text, re.MULTILINE)
    if m is None or m[1] not in _PURE_BACKENDS or _BUILDS_CODE.search(text) or \
            "[tool.poetry.build]" in text:
        return ""
    return f"pyproject.toml builds with {m[1]}, which compiles nothing, and lists no ext-modules"


def _code_only(text: str) -> str | None:
    """The names a Python source uses (names, attributes, keywords, imports, and strings that
    are one word, such as a `"ext_modules"` key), without its comments and prose (a docstring
    that mentions extensions builds none); None when it does not parse, or when a
    `setup(**kwargs)` call takes arguments this reading cannot see."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    names: list[str] = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and _dotted(n.func).rpartition(".")[2] == "setup" and \
                any(kw.arg is None for kw in n.keywords):
            return None
        names.append(n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute)
                     else n.arg or "" if isinstance(n, ast.keyword) else
                     n.name if isinstance(n, ast.alias) else
                     n.value if isinstance(n, ast.Constant) and isinstance(n.value, str) and
                     re.fullmatch(r"\w+", n.value) else "")
    return " ".join(n for n in names if n)
