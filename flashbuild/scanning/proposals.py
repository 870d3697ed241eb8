"""A finding's fix as a recipe step: what `recipe init` makes of each finding.

The check that makes a finding knows its facts, so it also proposes the step (`Fix.step`):
which transform, with which params, for which arch (`when`), and why a draft must refuse it.
`recipe init` (draft.py) only collects the proposals and lets each kind merge its own: the
proposals of one kind that must be one step (every instantiation file in one
`explicit-instantiations` step, every source of one arch in one `exclude-sources` step) are
merged by that kind's `draft`, never by a switch on rule ids.

The kinds run in `rank` order, and their steps land in the recipe in that order (patch steps
apply in order): instantiation guards, dynamic loading, arch conditions, source exclusions,
traits. A finding whose fix proposes nothing becomes a `# TODO:` after every proposal's.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from flashbuild import buildsystems
from flashbuild.scanning.findings import Severity

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Self

    from flashbuild.arch import Arch
    from flashbuild.scanning.findings import Finding


@dataclass(frozen=True, kw_only=True)
class ProposedStep:
    """One `[[patch]]` step of a draft (its `expect` count is planned later, on the tree)."""

    id: str
    description: str
    transform: str
    params: dict[str, Any]
    when: dict[str, Any]
    comment: str = ""
    """Rendered above the step (`REVIEW: …` marks a decision flashbuild made)."""


@dataclass
class Drafted:
    """What one kind of proposal makes of its findings."""

    steps: list[ProposedStep] = field(default_factory=list)
    refused: list[tuple[Finding, str]] = field(default_factory=list)
    """A transform could make the edit, but it would harm: why not."""
    handled: list[tuple[Finding, str]] = field(default_factory=list)
    """No step needed: what already takes care of it."""
    todos: list[Finding] = field(default_factory=list)
    """A person must decide."""


def arch_when(archs: Sequence[Arch]) -> dict[str, Any]:
    """The `when` of a step for these archs, each spelled with its suffix (`sm_120a`)."""
    return {"arch": sorted({a.sm for a in archs})}


class Proposal:
    """What recipe init makes of one finding's fix. Subclasses are frozen dataclasses; each
    kind merges its own proposals in `draft`."""

    rank: ClassVar[int]
    """Where this kind's steps and notes go in the draft (lower first)."""

    @property
    def order(self) -> int:
        return self.rank

    @classmethod
    def draft(cls, members: Sequence[tuple[Finding, Self]]) -> Drafted:
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class GuardInstantiation(Proposal):
    """An explicit instantiation MSVC rejects (guarded), or one another file needs (kept)."""

    rank: ClassVar[int] = 0
    file: str
    site: Literal["kernel", "host", "kept"]

    @classmethod
    def draft(cls, members: Sequence[tuple[Finding, Self]]) -> Drafted:
        out = Drafted()
        files = sorted({p.file for _f, p in members if p.site != "kept"})
        count = {site: sum(p.site == site for _f, p in members)
                 for site in ("kernel", "host", "kept")}
        if files:
            out.steps.append(ProposedStep(
                id="msvc-instantiations", transform="explicit-instantiations",
                description="Guard explicit template instantiations from MSVC (scan "
                "FB140/FB141)", params={"files": files, "mode": "guard"},
                when={"platform": ["windows"]},
                comment=f"{count['kernel']} kernel and {count['host']} host instantiation "
                f"sites; {count['kept']} host instantiation(s) kept (another file needs them)"
                if count["kept"] else ""))
        # Name the step only when the draft has one (issue 21: a note never names a step
        # the draft lacks).
        out.handled += [(f, "kept by the explicit-instantiations step" if files else
                         "kept: no step of this draft edits explicit instantiations")
                        for f, p in members if p.site == "kept"]
        return out


@dataclass(frozen=True, kw_only=True)
class PortableDynamicLoading(Proposal):
    """dlfcn code made portable (`loader`), or a plugin's entry points exported (`plugin`)."""

    rank: ClassVar[int] = 1
    file: str
    role: Literal["loader", "plugin"]

    @classmethod
    def draft(cls, members: Sequence[tuple[Finding, Self]]) -> Drafted:
        loaders = sorted({p.file for _f, p in members if p.role == "loader"})
        plugins = sorted({p.file for _f, p in members if p.role == "plugin"})
        params: dict[str, Any] = {"mode": "portable", "files": loaders}
        if plugins:
            params["plugin_files"] = plugins
        return Drafted(steps=[ProposedStep(
            id="portable-dynamic-loading", transform="dynamic-loading",
            description="dlfcn.h does not exist on Windows: route dlopen/dlsym through the "
            "compat header and export the plugin's entry points (scan FB101/FB102)",
            params=params, when={"platform": ["windows"]})])


@dataclass(frozen=True, kw_only=True)
class WidenArchCondition(Proposal):
    """A `macro-edit` that lets the target take a branch a sibling arch takes (`equality`, or
    a `range` whose bound leaves the target out), or adds it to an `#error` allow-list
    (`allow-list`). `find` is '' when no edit can be written (a range bound, an allow-list
    with no value to extend): a TODO."""

    rank: ClassVar[int] = 2
    file: str
    arch: Arch
    kind: Literal["equality", "range", "allow-list"]
    find: str = ""
    replace: str = ""
    directives: tuple[str, ...] = ("if", "elif")
    ladder: tuple[str, ...] = ()
    """Macros the branch defines: widening an arch-detection ladder turns on features the
    target does not have, so the draft refuses it."""
    summary: str
    """The rule's one-line summary, for the step's description."""

    @classmethod
    def draft(cls, members: Sequence[tuple[Finding, Self]]) -> Drafted:
        out = Drafted()
        seen: set[tuple[str, str]] = set()
        # Branch widenings first, then allow-lists (the order recipe init has always used).
        for f, p in sorted(members, key=lambda m: m[1].kind == "allow-list"):
            if p.ladder:
                out.refused.append((f, "arch-detection ladder: the branch defines "
                                    f"{', '.join(p.ladder[:3])}; accepting {p.arch.code * 10} "
                                    "there turns on features the target does not have"))
                continue
            if not p.find:
                out.todos.append(f)
                continue
            key = (f.path, p.find)
            if key in seen:
                continue
            seen.add(key)
            slug = re.sub(r"[^a-z0-9]+", "-", f"{Path(f.path).stem}-"
                          f"{p.arch.sm.removeprefix('sm_')}-{p.kind}-{len(seen)}")
            out.steps.append(ProposedStep(
                id=slug.strip("-"), transform="macro-edit",
                description=f"{p.summary} at {f.path}:{f.line} (scan {f.rule})",
                params={"files": [p.file], "find": p.find, "replace": p.replace,
                        "directives": list(p.directives)},
                when=arch_when([p.arch]),
                comment="REVIEW: the target now takes this path; check it is right for it"
                if p.kind != "allow-list" else ""))
        return out


@dataclass(frozen=True, kw_only=True)
class ExcludeSources(Proposal):
    """Drop a source that uses an instruction the target lacks from the target's build.
    `refusal` says why the check found that this would harm ('' when it would not); a note
    (undecided, or a site no kernel reaches) proposes nothing."""

    rank: ClassVar[int] = 4
    file: str
    arch: Arch
    refusal: str = ""

    @classmethod
    def draft(cls, members: Sequence[tuple[Finding, Self]]) -> Drafted:
        out = Drafted()
        by_arch: dict[Arch, set[str]] = defaultdict(set)
        rules: dict[Arch, set[str]] = defaultdict(set)
        for f, p in members:
            if f.severity is Severity.NOTE:
                continue  # undecidable: a note, never a drafted exclusion
            if p.refusal:
                out.refused.append((f, p.refusal))
            else:
                by_arch[p.arch].add(p.file)
                rules[p.arch].add(f.rule)
        for arch in sorted(by_arch, key=lambda a: (a.code, a.suffix.value)):
            out.steps.append(ProposedStep(
                id=f"exclude-for-sm{arch.sm.removeprefix('sm_')}", transform="exclude-sources",
                description=f"Sources using instructions {arch.sm} lacks (scan "
                f"{'/'.join(sorted(rules[arch]))})",
                params={"globs": sorted(by_arch[arch])}, when=arch_when([arch])))
        return out


@dataclass(frozen=True, kw_only=True)
class EditCall(Proposal):
    """A `replace-block` of the lines of one call, rewritten for the toolkit (CUB's removed
    `debug_synchronous` argument left out), or None when the call's lines are no unique
    region of the file: a TODO."""

    rank: ClassVar[int] = 3
    step: ProposedStep | None

    @classmethod
    def draft(cls, members: Sequence[tuple[Finding, Self]]) -> Drafted:
        out = Drafted()
        for f, p in members:
            if p.step is None:
                out.todos.append(f)
            elif p.step not in out.steps:
                # Each line of a file that reads the same gets one edit (`_line_step`): one
                # step for all of them. Another edit under the same id (another file of that
                # basename) is a step of its own; the draft gives it an id of its own.
                out.steps.append(p.step)
        return out


@dataclass(frozen=True, kw_only=True)
class DeriveTraits(Proposal):
    """An `insert-block` specialisation of a traits struct for the target, or None when the
    check could not derive one (not a primary template of one non-type parameter, no unique
    anchor): a TODO."""

    rank: ClassVar[int] = 5
    step: ProposedStep | None

    @classmethod
    def draft(cls, members: Sequence[tuple[Finding, Self]]) -> Drafted:
        out = Drafted()
        for f, p in members:
            if p.step is None:
                out.todos.append(f)
            else:
                out.steps.append(p.step)
        return out


@dataclass(frozen=True, kw_only=True)
class NoStepNeeded(Proposal):
    """A later stage of `flashbuild build` takes care of it (`install`: the loader shim;
    `build`: the environment it composes): a note in the draft, no step."""

    rank: ClassVar[int] = 6
    stage: Literal["install", "build"]
    reason: str

    @property
    def order(self) -> int:
        return self.rank + (self.stage == "build")

    @classmethod
    def draft(cls, members: Sequence[tuple[Finding, Self]]) -> Drafted:
        return Drafted(handled=[(f, handled_by_build(f, backend=None)) for f, _p in members])


LOADER_SHIM = NoStepNeeded(stage="install", reason="the install step of `flashbuild build` "
                           "adds the loader shim to this __init__.py")
"""A package `__init__.py` that registers no DLL folder: the install step's shim does it."""


# --- the build environment: what a fix asks of [[build.env]] rather than of a patch step ---

MSVC_NVCC_FLAGS = ("-Xcompiler /Zc:preprocessor", "-DUSE_CUDA")
"""The flags a draft may append for nvcc on Windows (NVCC_APPEND_FLAGS, read by nvcc itself,
so setup.py needs no edit), in the order they are appended."""


@dataclass(frozen=True, kw_only=True)
class NvccAppendFlag:
    """Append `flag` to nvcc's command line on Windows (`[[build.env]] NVCC_APPEND_FLAGS`)."""

    flag: Literal["-Xcompiler /Zc:preprocessor", "-DUSE_CUDA"]


@dataclass(frozen=True, kw_only=True)
class ForceBuild:
    """Compile instead of downloading a prebuilt wheel: the tree's `*_FORCE_BUILD` switch."""


@dataclass(frozen=True, kw_only=True)
class ChooseArchList:
    """setup.py hard-codes its gencode list: the arch comes from the tree's own arch switch
    or from flashbuild's build hook, not from TORCH_CUDA_ARCH_LIST."""


EnvProposal = NvccAppendFlag | ForceBuild | ChooseArchList
"""What a fix asks of the build environment (`Fix.env`)."""


def nvcc_append_flags(findings: Sequence[Finding]) -> list[str]:
    """The flags the findings' fixes ask nvcc to get, in `MSVC_NVCC_FLAGS` order."""
    asked = {f.fix.env.flag for f in findings if isinstance(f.fix.env, NvccAppendFlag)}
    return [flag for flag in MSVC_NVCC_FLAGS if flag in asked]


# --- what `flashbuild build` does by itself ---------------------------------------------------

#: Why the build hook takes care of a hard-coded gencode list (setuptools trees).
BUILD_HOOK_ARCH = ("`flashbuild build` replaces this gencode list with --arch's -gencode "
                   "flags (its build hook), then checks the arch in torch's build.ninja")


def handled_by_build(f: Finding, *, backend: str | None) -> str:
    """Why `flashbuild build` takes care of this finding with no recipe step and no change to
    the tree ("" when it does not): a later stage of the build does it (`NoStepNeeded`: the
    loader shim, CUDA 13's include/cccl for the host compiler), or, for a setuptools tree
    (`backend`), the build hook replaces a hard-coded gencode list.

    The one decision `recipe init` lists as "Handled without a step" and `scan` does not count
    as an error (issue 28): a scan error means the build fails without a change."""
    step = f.fix.step
    if isinstance(step, NoStepNeeded):
        return step.reason
    if isinstance(f.fix.env, ChooseArchList) and backend is not None and \
            buildsystems.get(backend).reads_torch_arch_list:
        return BUILD_HOOK_ARCH
    return ""
