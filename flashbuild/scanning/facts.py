"""What a finding knows about its site, typed: one small frozen dataclass per kind of fact,
`Facts` their union (`Finding.facts`).

The check that makes a finding fills them; the tree-wide pass (scan.py), the preprocessor and
compiler verdicts (truth.py, compiletruth.py) and the call graph read them. An arch is carried
as an `Arch`, so its suffix survives (`sm_120a` stays `sm_120a`, `sm_100f` stays `sm_100f`).
`dataclasses.asdict(finding.facts)` gives the old `data` dict's keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flashbuild.arch import Arch


class TreeCheck(StrEnum):
    """What the tree-wide pass must confirm before a per-file finding stands."""

    COMPILED_FOR_TARGET = "compiled-for-target"
    """The file is compiled for the target (the build lists it, its gates hold)."""
    NO_NOMINMAX = "no-nominmax"
    """No build file or source of the tree defines NOMINMAX."""
    LIBRARY_BUILT = "library-built"
    """The library a hard-coded name points at is built for the target."""
    PLUGIN_SOURCE = "plugin-source"
    """The file is the source of a shared library the tree loads with dlsym."""
    NO_SIBLING_MODULE = "no-sibling-module"
    """No `.py` module of that name sits beside the importing `__init__.py`."""
    NO_MATH_DEFINES = "no-math-defines"
    """No build file of the tree passes `_USE_MATH_DEFINES` to the compiler."""
    CXX_STANDARD_BELOW_20 = "cxx-standard-below-20"
    """The build compiles the file as C++17 or older (a flag or setting says so)."""


#: Macros a build file may define for every unit that a per-file check must know of: NOMINMAX
#: (FB130) and _USE_MATH_DEFINES (FB113). The build-file readers record them as `defines`.
TREE_DEFINES = frozenset({"NOMINMAX", "_USE_MATH_DEFINES"})


@dataclass(frozen=True, kw_only=True)
class DlopenFacts:
    """`#include <dlfcn.h>` (FB101)."""

    calls: tuple[str, ...]
    """The dlopen/dlsym/dlerror/dlclose calls of the file (the first few)."""


@dataclass(frozen=True, kw_only=True)
class PluginExportFacts:
    """An `extern "C"` definition a Windows DLL would not export (FB102)."""

    symbol: str
    needs: TreeCheck = TreeCheck.PLUGIN_SOURCE


@dataclass(frozen=True, kw_only=True)
class PosixHeaderFacts:
    """A POSIX-only header in host-compiled code (FB110)."""

    header: str


@dataclass(frozen=True, kw_only=True)
class WindowsMacroFacts:
    """An identifier `<windows.h>` defines as a macro (FB130)."""

    needs: TreeCheck | None = None
    """`NO_NOMINMAX` for `min`/`max`; None for names NOMINMAX does not remove (`small`)."""


@dataclass(frozen=True, kw_only=True)
class AllowListFacts:
    """A `__CUDA_ARCH__ == …` allow-list whose `#else` is an `#error` (FB150)."""

    arch: Arch
    gate_line: int
    listed: tuple[int, ...]
    """The `__CUDA_ARCH__` values the list accepts."""
    directives: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class ArchBranchFacts:
    """A branch a sibling arch takes and the target does not (FB151)."""

    arch: Arch
    directives: tuple[str, ...]
    """The preprocessor directives the condition sits in (`if`, `elif`, `define`)."""
    ladder: tuple[str, ...]
    """Macros the branch defines: an arch-detection ladder when not empty."""


@dataclass(frozen=True, kw_only=True)
class RuntimeMajorFacts:
    """A run-time test of the compute-capability major that leaves the target out (FB153)."""

    arch: Arch


@dataclass(frozen=True, kw_only=True)
class PlaceholderFacts:
    """A kernel whose body for the target is only a trap or nothing (FB154); for the
    summary finding, `kernel` is ''."""

    arch: Arch
    kernel: str
    via: str
    """The device function that is the kernel's whole body and holds the gate ('' if none)."""
    gate_path: str
    """The file that holds the gate (the kernel's, or `via`'s)."""
    gate_line: int
    work_line: int
    """First line of the work the target's pass drops (the preprocessor must drop it too)."""
    trap_line: int
    """First line of the trap the target's pass keeps (0: an empty body)."""
    written_for: tuple[str, ...]
    """The archs (`sm_90`) whose device passes keep the work."""


@dataclass(frozen=True, kw_only=True)
class InstructionFacts:
    """Inline PTX the target lacks (FB160)."""

    instruction: str
    """The `ptx_table.INSTRUCTIONS` key."""
    arch: Arch
    """The target arch the device pass compiles for, suffix included."""
    needs_arch: str
    """What the instruction needs, in words (`sm_90a`, `sm_100a/sm_100f`)."""
    owner: str
    """What the site sits in: `entity` (a named function) or another `callgraph` kind."""
    owner_names: tuple[str, ...]
    undecided: tuple[str, ...] = ()
    """Macros the static reader could not decide (a note until the preprocessor decides)."""
    needs: TreeCheck = TreeCheck.COMPILED_FOR_TARGET


@dataclass(frozen=True, kw_only=True)
class SharedMemoryFacts:
    """A shared-memory budget above the target's limit (FB170)."""

    arch: Arch
    limit: int
    """The target's opt-in shared memory per block, in bytes."""
    value: int
    """What the source asks for, in bytes."""
    member: str
    struct: str
    """The traits struct that holds the member ('' at file scope)."""
    specialised: str
    """Template arguments when the struct is a specialisation ('' for a primary template)."""
    struct_line: int
    struct_text: str
    """The struct's whole declaration, `template <…>` head included."""


@dataclass(frozen=True, kw_only=True)
class InstantiationFacts:
    """An explicit template instantiation (FB140/FB141/FB142)."""

    kind: str
    """`kernel` or `host template`."""
    macro: str | None = None
    """The macro that generates the instantiation, if one does."""


@dataclass(frozen=True, kw_only=True)
class ExtensionImportFacts:
    """A package imports an extension module and registers no DLL folder (FB181)."""

    module: str
    needs: TreeCheck | None = None


@dataclass(frozen=True, kw_only=True)
class LibraryNameFacts:
    """A hard-coded `.so` name in Python (FB182)."""

    literal: str
    needs: TreeCheck = TreeCheck.LIBRARY_BUILT


@dataclass(frozen=True, kw_only=True)
class ArchLiteralFacts:
    """A CMake gate comparing an arch variable with one literal (FB152)."""

    literal: str
    """The literal as the CMake file spells it (`100a`)."""


@dataclass(frozen=True, kw_only=True)
class ArchFallbackFacts:
    """An arch variable taken from the build machine's GPU, with a fallback (FB194)."""

    variable: str
    fallback: str


@dataclass(frozen=True, kw_only=True)
class MsvcFlagsFacts:
    """MSVC flags a CUDA CMake project does not pass (FB190)."""

    missing: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class DllOutputFacts:
    """A shared library whose DLL output folder is not set (FB191)."""

    target: str


@dataclass(frozen=True, kw_only=True)
class MathConstantFacts:
    """`M_PI` and friends where MSVC's <math.h> does not define them (FB113)."""

    names: tuple[str, ...]
    """The constants the file uses (the first few)."""
    needs: TreeCheck = TreeCheck.NO_MATH_DEFINES


@dataclass(frozen=True, kw_only=True)
class DesignatedInitFacts:
    """A designated initialiser (`.x = 1`) that MSVC accepts only from /std:c++20 (FB114)."""

    language: str
    """Whose standard counts: `CUDA` (a .cu/.cuh file), `CXX` (a .cpp), `any` (a header)."""
    needs: TreeCheck = TreeCheck.CXX_STANDARD_BELOW_20


@dataclass(frozen=True, kw_only=True)
class CstdintFacts:
    """Fixed-width integer types in a unit that includes no <cstdint> (FB117)."""

    names: tuple[str, ...]
    unit: str
    """The compiled source whose includes were read."""


@dataclass(frozen=True, kw_only=True)
class LibraryHeaderFacts:
    """A library header no folder of the build holds (FB118)."""

    header: str
    library: str
    packages: tuple[str, ...]
    """PyPI packages that ship the header (`nvidia-cudnn-cu13`); empty when none does."""


@dataclass(frozen=True, kw_only=True)
class CcclFacts:
    """A host-compiled source of a CUDA extension that reaches a CCCL header (FB222)."""

    source: str
    header: str


Facts = (DlopenFacts | PluginExportFacts | PosixHeaderFacts | WindowsMacroFacts
         | AllowListFacts | ArchBranchFacts | RuntimeMajorFacts | PlaceholderFacts
         | InstructionFacts
         | SharedMemoryFacts | InstantiationFacts | ExtensionImportFacts | LibraryNameFacts
         | ArchLiteralFacts | ArchFallbackFacts | MsvcFlagsFacts | DllOutputFacts | CcclFacts
         | MathConstantFacts | DesignatedInitFacts | CstdintFacts | LibraryHeaderFacts)
"""Every kind of fact a finding carries (`Finding.facts`; None for a finding with none)."""


def needs_of(facts: Facts | None) -> TreeCheck | None:
    """What the tree-wide pass must confirm for a finding with these facts (None: nothing)."""
    if isinstance(facts, PluginExportFacts | WindowsMacroFacts | InstructionFacts
                  | ExtensionImportFacts | LibraryNameFacts | MathConstantFacts
                  | DesignatedInitFacts):
        return facts.needs
    return None
