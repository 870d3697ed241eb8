"""The contract between the patch engine and the built-in transforms.

A transform is a pure function of (tree, params) → `TransformResult`. It reads files through
a `TreeView` (never the filesystem directly), returns the full new text of every file it
changes (in that file's own line-ending style) and every site it looked at, and raises
`PatchError` when what it finds differs from what the recipe expects. The engine plans all
transforms in memory first and writes nothing until every step has succeeded.

Each transform's params are a frozen, keyword-only dataclass declared with its name in
`flashbuild/recipes/transforms.py` (one docstring per field; the recipe loader builds it from
TOML by introspection and the JSON schema is generated from it, without importing patching);
each transform module here registers its apply function under that name in
`flashbuild.patching.transforms.REGISTRY` (`TransformDef.built_in`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from flashbuild.recipes.transforms import SPECS

if TYPE_CHECKING:
    from collections.abc import Callable

SiteAction = Literal["edit", "keep", "already", "skip", "refused"]


@dataclass(frozen=True)
class Site:
    """One place a transform matched: what it is, and what the transform did with it."""

    path: str
    """Path relative to the tree root, with forward slashes."""
    line: int
    """1-based line of the first character of the site."""
    kind: str
    """What was found, e.g. `kernel-instantiation`, `host-instantiation`, `dlopen-include`."""
    action: SiteAction
    """`edit`: changed; `keep`: deliberately left (reason in `note`); `already`: the change
    is already there; `skip`: not applicable; `refused`: the edit the step asks for would be
    unsafe here (it would split a backslash-continued `#define`, remove a device symbol another
    unit links against, route the target into a branch that only traps), so the site is left
    as it is and `note` says why. A refused site is always reported, and counts for `expect`
    (it is there: upstream did not change)."""
    note: str = ""
    snippet: str = ""


@dataclass
class TransformResult:
    changes: dict[str, str] = field(default_factory=dict)
    """relative path → complete new text. Only files whose text differs. A value of `None`
    is not allowed; deletions are not a transform's business."""
    sites: list[Site] = field(default_factory=list)
    build_excludes: list[str] = field(default_factory=list)
    """Sources the build must leave out (exclude-sources)."""
    notes: list[str] = field(default_factory=list)


class TreeView(Protocol):
    """Read access to the tree being patched, including edits planned by earlier steps."""

    def read(self, path: str) -> str:
        """Text of a file (decoded UTF-8, line endings preserved). Raises PatchError for a
        binary or unreadable file, TreeError for a path outside the tree."""
        ...

    def exists(self, path: str) -> bool: ...

    def glob(self, pattern: str) -> list[str]:
        """Relative paths (forward slashes, sorted) matching a glob, `**` allowed."""
        ...


@dataclass(frozen=True)
class TransformContext:
    """What a transform may need besides its params: the target platform and archs."""

    platform: str
    archs: tuple[str, ...]
    """Target arch codes as `sm_XX[a|f]` strings."""
    sources: tuple[str, ...] = ()
    """All C++/CUDA sources of the recipe (relative paths), e.g. for cross-TU references."""
    separable: str = ""
    """Why the build links device code across translation units (`CMakeLists.txt:12:
    CUDA_SEPARABLE_COMPILATION ON`, `-rdc=true` in the recipe's NVCC_APPEND_FLAGS), '' when
    it compiles each unit whole (source/separable.py). Then a kernel or `__device__` function
    one unit loses may be one another unit needs at device link time."""


@dataclass(frozen=True)
class TransformDef:
    name: str
    params: type[Any]
    apply: Callable[[TreeView, Any, TransformContext], TransformResult]
    summary: str

    @classmethod
    def built_in(cls, name: str,
                 apply: Callable[[TreeView, Any, TransformContext], TransformResult],
                 ) -> TransformDef:
        """The code behind a built-in transform; its params and summary are the ones recipes
        declare (recipes/transforms.py), one fact in one place."""
        spec = SPECS[name]
        return cls(name, spec.params, apply, spec.summary)
