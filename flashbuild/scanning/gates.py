"""Build-system gates: whether a source that a CMake file or setup.py lists is compiled for a
target, read from the `if()` conditions around the place it is listed.

CMake and setup.py conditions are not evaluated in general (that needs the configured
project); a condition is judged by the arch spellings and platform words it names:
`"90a" IN_LIST CMAKE_CUDA_ARCHITECTURES` is true only for a target spelled `90a`; `WIN32`,
`MSVC`, `sys.platform == "win32"` only on Windows; `NOT` / `not` / `!=` invert. A condition
naming neither is "unknown" and counts as true, so a gate the scan cannot read never hides a
finding.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from flashbuild.arch import FIRST_CUDA

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from flashbuild.arch import Arch

ARCH_LITERAL = re.compile(r"^(?:sm_?|compute_?)?(\d{2,3})([af]?)(?:-real|-virtual)?$",
                          re.IGNORECASE)
DOTTED = re.compile(r"^(\d{1,2})\.(\d)([af]?)(?:\+ptx)?$", re.IGNORECASE)


def arch_literal(text: str) -> tuple[int, str] | None:
    """`"120a"` / `sm_90a` / `100` → (code, suffix); anything else → None. Codes must be a
    known SM (50…121) to count, so `3.26` or a port number never looks like an arch."""
    raw = text.strip().strip("\"'")
    dotted = DOTTED.match(raw)
    if dotted:
        code, suffix = int(dotted[1]) * 10 + int(dotted[2]), dotted[3].lower()
    else:
        m = ARCH_LITERAL.match(raw)
        if not m:
            return None
        code, suffix = int(m[1]), m[2].lower()
    return (code, suffix) if code in FIRST_CUDA else None


def same_generation(a: int, b: int) -> bool:
    """Blackwell-class codes (100…121) are siblings: a gate naming one is usually meant for
    all of them. Older majors are distinct generations with distinct instruction sets."""
    return a >= 100 and b >= 100


@dataclass(frozen=True)
class Gate:
    """One condition on the path to a listed source."""

    text: str
    """The condition as written (for evidence)."""
    archs: tuple[tuple[int, str], ...]
    """Arch literals it names."""
    platform: Literal["windows", "posix"] | None
    """Platform word it names: WIN32/MSVC/win32/nt = windows; UNIX/linux/posix = posix."""
    negated: bool
    """Whether the branch is taken when the condition is false (NOT, else, elseif after)."""

    def holds(self, platform: str, archs: Sequence[Arch]) -> bool | None:
        """True/False when the gate is judged, None when it names nothing the scan reads."""
        value: bool | None = None
        if self.archs:
            value = any(code == a.code and suffix == a.suffix.value
                        for code, suffix in self.archs for a in archs)
        if self.platform is not None:
            on = (platform == "windows") == (self.platform == "windows")
            value = on if value is None else (value and on)
        if value is None:
            return None
        return not value if self.negated else value


@dataclass(frozen=True)
class Mention:
    """A source (or folder, or glob) named by a build file, with the gates around it."""

    text: str
    build_file: str
    line: int
    gates: tuple[Gate, ...]
    shared: str = ""
    """The SHARED library target it is compiled into, if any."""

    def matches(self, path: str) -> bool:
        """Whether this mention names `path` (relative to the tree)."""
        raw = re.sub(r"\$\{[^}]*\}/?|\$\([^)]*\)/?", "", self.text).strip("\"'").lstrip("./")
        if not raw:
            return False
        build_dir = self.build_file.rpartition("/")[0]
        candidates = [raw, f"{build_dir}/{raw}" if build_dir else raw]
        for pattern in candidates:
            if any(ch in pattern for ch in "*?["):
                if fnmatch.fnmatch(path, pattern) or fnmatch.fnmatch(path, f"*/{pattern}"):
                    return True
            elif path == pattern or path.endswith("/" + pattern) or \
                    path.startswith(pattern.rstrip("/") + "/"):
                return True
        return False


@dataclass(frozen=True)
class Verdict:
    compiled: bool
    why: str


@dataclass(frozen=True)
class BuildGates:
    mentions: tuple[Mention, ...]

    def compiled_for(self, path: str, platform: str, archs: Sequence[Arch]) -> Verdict | None:
        """Whether the build compiles `path` for the target; None when no build file names
        it (then the scan assumes it is compiled, e.g. a header)."""
        hits = [m for m in self.mentions if m.matches(path)]
        if not hits:
            return None
        for m in hits:
            if all(g.holds(platform, archs) is not False for g in m.gates):
                gates = " and ".join(g.text for g in m.gates) or "unconditionally"
                return Verdict(True, f"{m.build_file}:{m.line} lists it ({gates})")
        m = hits[0]
        failed = next(g for g in m.gates if g.holds(platform, archs) is False)
        return Verdict(False, f"{m.build_file}:{m.line} lists it only when `{failed.text}`")


    def shared_library(self, path: str) -> str | None:
        """`add_library(NAME SHARED …)` evidence when `path` is compiled into a shared
        library (a plugin), else None."""
        hit = next((m for m in self.mentions if m.shared and m.matches(path)), None)
        return None if hit is None else f"{hit.build_file}:{hit.line}: SHARED library " \
            f"`{hit.shared}`"


def gate_from_words(text: str, words: Iterable[str], *, negated: bool) -> Gate:
    archs: list[tuple[int, str]] = []
    platform: Literal["windows", "posix"] | None = None
    invert = False
    for word in words:
        w = word.strip().strip("\"'")
        lit = arch_literal(w)
        if lit is not None:
            archs.append(lit)
            continue
        low = w.lower()
        if low in ("win32", "msvc", "windows", "nt", "_win32"):
            platform = "windows"
        elif low in ("unix", "linux", "posix", "apple", "darwin", "freebsd", "emscripten"):
            # `sys.platform` values that are not Windows (`emscripten`: Pyodide's wasm32).
            platform = "posix"
        elif low in ("not", "!="):
            invert = not invert
    return Gate(text=text, archs=tuple(archs), platform=platform, negated=negated != invert)
