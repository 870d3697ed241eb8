"""Which headers a host compiler (g++ or cl.exe, not nvcc) reaches from one source file.

torch's cpp_extension compiles a `.cpp` of a CUDA extension with the host compiler and
`<CUDA_HOME>/include` on the include path. CUDA 13 moved CCCL (`cuda/std/…`, `cub/`,
`thrust/`, `nv/`) to `<CUDA_HOME>/include/cccl`, which nvcc adds for itself and torch does
not, so a `.cpp` that reaches a CCCL header stops with "No such file or directory" (FlashMLA's
`api.cpp` → `cutlass/fast_math.h` → `#include CUDA_STD_HEADER(utility)` → `<cuda/std/utility>`).

The walk is a small preprocessor over the files it can read (the tree and its include
folders, vendored code included): `#if` branches are evaluated for a plain host compile
(`__CUDACC__`, `__CUDA_ARCH__`, `__CUDACC_RTC__` undefined, the platform's own macros
defined), object- and function-like `#define`s met on the way are kept, and a computed
`#include NAME(arg)` is expanded with them. A branch it cannot decide is not followed, so what
it reports is certainly reached; the real preprocessor (`preprocess`) confirms it when a
toolkit is present.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flashbuild.source.pp import IDE_ONLY, Evaluator, Pass

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(\w+)(.*)$")
_DEFINE = re.compile(r"^(\w+)(\(([^)]*)\))?\s*(.*)$")
#: Header prefixes that CUDA 13 keeps under include/cccl only (`cuda/` itself is shared with
#: trees' own folders: see `is_cccl_header`).
CCCL_PREFIXES = ("cuda/std/", "cuda/__", "cub/", "thrust/", "nv/")
_CCCL_CUDA_TOP = re.compile(r"^cuda/[a-z_]+$")


def is_cccl_header(header: str) -> bool:
    """Whether an include names a CCCL header: under `cuda/std/`, `cub/`, `thrust/`, `nv/`, or
    one of libcu++'s extension-less `cuda/<name>` headers (`cuda/atomic`, `cuda/ptx`; CUDA
    13.0's include/cccl/cuda holds no other kind). A tree's own `cuda/q_matrix.cuh` is not one:
    its absence is the tree's problem, not CCCL's place."""
    return header.startswith(CCCL_PREFIXES) or bool(_CCCL_CUDA_TOP.match(header))
_OTHER_OS = ("__APPLE__", "__QNX__", "__ANDROID__", "__FreeBSD__", "__OpenBSD__", "__NetBSD__",
             "__EMSCRIPTEN__", "__HIP_PLATFORM_AMD__", "__HIPCC__", "__HIP__")
_NVCC = ("__CUDACC__", "__NVCC__", "__CUDA_ARCH__", "__CUDACC_RTC__", "__CUDACC_VER_MAJOR__",
         "__CUDACC_VER_MINOR__", "__CUDA_ARCH_LIST__", "__NVCOMPILER", "__clang__", "__CUDA__")
#: Files read per question: CUTLASS's host-visible closure is a few hundred headers.
LIMIT = 3000


def host_compiler_pass(platform: str) -> Pass:
    """A plain host compile (no nvcc): the platform's compiler macros, no CUDA ones."""
    if platform == "windows":
        return Pass("host compiler (cl.exe)", {"_WIN32": 1, "_WIN64": 1, "_MSC_VER": 1944,
                                               "__cplusplus": 199711, "_MSVC_LANG": 202002},
                    frozenset({*_NVCC, *_OTHER_OS, *IDE_ONLY, "__linux__", "__unix__",
                               "__GNUC__", "linux", "unix"}))
    return Pass("host compiler (g++)", {"__linux__": 1, "__unix__": 1, "__GNUC__": 12,
                                        "__cplusplus": 202002},
                frozenset({*_NVCC, *_OTHER_OS, *IDE_ONLY, "_WIN32", "_WIN64", "_MSC_VER"}))


@dataclass(frozen=True)
class Reached:
    """A header the host compile reaches, and the include chain (path:line, outermost first)."""

    header: str
    chain: tuple[str, ...]


def first_cccl_include(source: str, include_dirs: Sequence[str], read: Callable[[str], str | None],
                       platform: str) -> Reached | None:
    """The first CCCL header (`is_cccl_header`) the host compile of `source` certainly includes
    and that no folder of `include_dirs` holds; None when there is none (or the walk cannot
    tell). Paths are tree-relative; `read` gives a file's text or None."""
    walk = _Walk(list(include_dirs), read, host_compiler_pass(platform))
    return walk.file(source, ())


@dataclass
class _Walk:
    include_dirs: list[str]
    read: Callable[[str], str | None]
    pass_: Pass

    def __post_init__(self) -> None:
        self.macros: dict[str, tuple[tuple[str, ...] | None, str]] = {}
        self.seen: set[str] = set()

    def _macro(self, name: str) -> str | None:
        m = self.macros.get(name)
        if m is None:
            return None
        return m[1] if m[0] is None else None

    def file(self, path: str, chain: tuple[str, ...]) -> Reached | None:  # noqa: PLR0912
        if path in self.seen or len(self.seen) > LIMIT:
            return None
        self.seen.add(path)
        text = self.read(path)
        if text is None:
            return None
        text = text.replace("\\\r\n", " ").replace("\\\n", " ")
        ev = Evaluator(self.pass_, self._lookup)
        # stack of (this branch active: 1/0/None, some earlier branch of the chain taken)
        stack: list[tuple[int | None, int | None]] = []
        for number, line in enumerate(text.splitlines(), 1):
            m = _DIRECTIVE.match(line)
            if m is None:
                continue
            word, rest = m[1], re.sub(r"/\*.*?\*/|//.*$", "", m[2]).strip()
            live = all(a == 1 for a, _t in stack)
            if word in ("if", "ifdef", "ifndef"):
                if word == "if":
                    v = ev.eval(rest)
                else:
                    d = ev.defined(rest.split()[0]) if rest else None
                    v = d if word == "ifdef" or d is None else int(not d)
                stack.append((v, v))
            elif word in ("elif", "elifdef", "elifndef") and stack:
                _a, done = stack[-1]
                if word == "elif":
                    v = ev.eval(rest)
                else:
                    d = ev.defined(rest.split()[0]) if rest else None
                    v = d if word == "elifdef" or d is None else int(not d)
                stack[-1] = _next_branch(done, v)
            elif word == "else" and stack:
                _a, done = stack[-1]
                stack[-1] = _next_branch(done, 1)
            elif word == "endif" and stack:
                stack.pop()
            elif not live:
                continue
            elif word == "define":
                definition = _DEFINE.match(rest)
                if definition:
                    params = tuple(p.strip() for p in definition[3].split(",")) \
                        if definition[2] else None
                    self.macros[definition[1]] = (params, definition[4].strip())
            elif word == "undef" and rest:
                self.macros.pop(rest.split()[0], None)
            elif word == "include":
                found = self._include(path, number, rest, chain)
                if found is not None:
                    return found
        return None

    def _lookup(self, name: str) -> str | None:
        return self._macro(name)

    def _include(self, path: str, number: int, rest: str, chain: tuple[str, ...]
                 ) -> Reached | None:
        spelled = self._spelled(rest)
        if spelled is None:
            return None
        quote, header = spelled
        here = (*chain, f"{path}:{number}")
        candidates = [posixpath.normpath(posixpath.join(posixpath.dirname(path), header))] \
            if quote == '"' else []
        candidates += [posixpath.normpath(posixpath.join(d, header)) for d in self.include_dirs]
        for cand in candidates:
            if cand in self.seen:
                return None
            if self.read(cand) is not None:
                return self.file(cand, here)
        if is_cccl_header(header):
            return Reached(header, here)
        return None

    def _spelled(self, rest: str) -> tuple[str, str] | None:
        m = re.match(r'^([<"])([^>"]+)[>"]', rest)
        if m:
            return m[1], m[2].strip()
        call = re.match(r"^(\w+)\s*(?:\(([^)]*)\))?", rest)
        if call is None or call[1] not in self.macros:
            return None
        params, body = self.macros[call[1]]
        if params is not None and call[2] is not None:
            args = [a.strip() for a in call[2].split(",")]
            for p, a in zip(params, args, strict=False):
                body = re.sub(rf"\b{re.escape(p)}\b", a, body)
        m = re.match(r'^([<"])([^>"]+)[>"]', body.strip())
        return (m[1], re.sub(r"\s+", "", m[2])) if m else None


def _next_branch(done: int | None, value: int | None) -> tuple[int | None, int | None]:
    """(active, done) of an `#elif value` / `#else` (value 1) after branches whose `done` says
    whether one of them was certainly taken (1), certainly none (0) or cannot tell (None)."""
    if done == 1:
        return 0, 1
    if done == 0:
        return value, value
    return (0 if value == 0 else None), (1 if value == 1 else None)
