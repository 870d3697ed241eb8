"""The built-in transforms as a recipe names them: each one's name, one-line summary and
params dataclass — what the recipe loader validates a `[[patch]]` step against and the JSON
schema documents.

The code that applies a transform is patching's (`flashbuild/patching/transforms/`), a later
layer: it registers its apply function under the same name (`patching.transforms.register`,
which also declares here any transform not built in, such as a test's). So loading a recipe
never imports the patch engine.
"""

from __future__ import annotations

import re
import re._constants as sre_constants  # type: ignore[import-not-found]
import re._parser as sre_parse  # type: ignore[import-not-found]
from collections.abc import Mapping  # noqa: TC003 (params are introspected at run time)
from dataclasses import dataclass, field
from typing import Any, Literal

from flashbuild.source.instantiations import DEFAULT_GUARD


@dataclass(frozen=True)
class TransformSpec:
    """A transform as recipes see it."""

    name: str
    params: type[Any]
    """The frozen, keyword-only params dataclass (one docstring per field)."""
    summary: str


#: Every transform a recipe may name, by name.
SPECS: dict[str, TransformSpec] = {}


def declare(spec: TransformSpec) -> TransformSpec:
    SPECS[spec.name] = spec
    return spec


#: Params that name files of the tree or of the recipe (a path or a glob, or a list of them).
#: A NUL cannot be part of a file name on any OS: `recipe check` called a NUL in `files`
#: valid and `patch` then reported "matched nothing" (issue 27). Other control characters
#: are legal in POSIX file names (recipe init drafts a name holding a newline), so they pass.
PATH_PARAMS = frozenset({"files", "sources", "plugin_files", "header",
                         "path", "from_file", "globs", "cmake_lists", "setup_py", "file"})


def path_param_problem(name: str, value: object) -> tuple[int | None, str] | None:
    """Why the value of the path param `name` cannot name a file (its list index, the reason),
    or None. Only PATH_PARAMS are checked; other types are left to the type check."""
    if name not in PATH_PARAMS:
        return None
    items = [(None, value)] if isinstance(value, str) else (
        list(enumerate(value)) if isinstance(value, list) else [])
    for index, item in items:
        if isinstance(item, str) and "\0" in item:
            return index, (f"holds a NUL character (\\0 or \\u0000) at position "
                           f"{item.index(chr(0))}: no file name can hold one; remove it")
    return None


# ------------------------------------------------------------------ explicit-instantiations

@dataclass(frozen=True, kw_only=True)
class ExplicitInstantiationsParams:
    """Parameters of `explicit-instantiations`."""

    files: tuple[str, ...]
    """Files to edit: paths or globs relative to the tree root (`kernels/*.cu`)."""
    mode: Literal["guard", "remove"] = "guard"
    """`guard`: wrap each run of adjacent sites in `#if <guard>` … `#endif` so one tree builds
    with every compiler; `remove`: replace each site with a marker comment."""
    guard: str = DEFAULT_GUARD
    """The preprocessor condition that keeps a site (guard mode); also recognised as an
    existing guard."""
    expect: int | Mapping[str, int] | None = None
    """Expected number of sites (all actions counted): a total, or a table path → count
    (files not named must have none). Unset: at least one. A mismatch is an error."""
    keep_referenced: bool = True
    """Keep (leave unguarded) a host template instantiation whose function another source of
    the recipe references; removing it would break the link."""
    sources: tuple[str, ...] = field(default_factory=tuple)
    """Extra files (globs) searched for cross-file references and instantiation macros, in
    addition to the recipe's sources (TransformContext.sources)."""


# --------------------------------------------------------------------------- dynamic-loading

@dataclass(frozen=True, kw_only=True)
class DynamicLoadingParams:
    """Parameters of `dynamic-loading`."""

    mode: Literal["portable", "stub"] = "portable"
    """`portable`: keep plugin loading working on Windows through the compat header;
    `stub`: replace the dispatcher with functions that report "not available"."""
    files: tuple[str, ...] = ()
    """portable: files (globs) whose `#include <dlfcn.h>` is rewritten."""
    header: str = ""
    """portable: where the compat header goes (relative to the tree); default: next to the
    first file of `files`. stub: the header whose declarations the stubs implement."""
    plugin_files: tuple[str, ...] = ()
    """portable: plugin sources (globs) whose `extern "C"` functions get the export macro."""
    export_macro: str = "FB_EXPORT"
    """portable: the export macro's name."""
    replace: str = ""
    """stub: the source whose whole content becomes the stubs (the dispatcher's .cpp)."""
    functions: tuple[str, ...] = ()
    """stub: the functions to implement (default: every function `header` declares)."""
    returns: Mapping[str, str] = field(default_factory=dict)
    """stub: function name → the C++ expression it returns (for types with no obvious
    "not available" value, e.g. an error enum)."""
    expect: int | Mapping[str, int] | None = None
    """Expected number of sites (includes, exports, stubbed functions). Unset: at least one."""


# --------------------------------------------------------------------------- text edits

@dataclass(frozen=True, kw_only=True)
class MacroEditParams:
    """Parameters of `macro-edit`."""

    files: tuple[str, ...]
    """Files (paths or globs relative to the tree root)."""
    find: str
    """Text to find inside preprocessor conditions / `#define` bodies (a regex if `regex`)."""
    replace: str
    """Replacement (with `\\1` groups when `regex`)."""
    regex: bool = False
    """Treat `find` as a Python regular expression."""
    already: str = ""
    """Text (a regex if `regex`) whose presence at a match marks it as done. Default: the
    literal `replace` text (so re-applying is a no-op)."""
    directives: tuple[Literal["if", "elif", "define", "define-function"], ...] = (
        "if", "elif", "define", "define-function")
    """Which directives to edit."""
    expect: int | Mapping[str, int] | None = None
    """Expected number of matches (edited + already). Unset: at least one."""

    def __post_init__(self) -> None:
        if self.regex:  # compiled when the recipe loads: exit 4 with its file:line
            _check_regex("find", self.find)
            _check_template(self.find, self.replace)
            if self.already:
                _check_regex("already", self.already)


def _check_template(pattern: str, replace: str) -> None:
    """Raise ValueError for a `replace` that names a group `find` lacks (`\\2` with one
    group): it failed only at patch time, as an internal error, after `recipe check` said the
    recipe was valid (issue 22). `sub` compiles the template before it looks for a match."""
    compiled = re.compile(pattern)
    try:
        compiled.sub(replace, "")
    except (re.error, IndexError) as exc:
        groups = compiled.groups
        named = ", ".join(f"<{n}>" for n in compiled.groupindex) or "none named"
        raise ValueError(f"`replace` = {replace!r} does not fit `find`: {exc} (`find` has "
                         f"{groups} group(s), {named}; refer only to those, or escape a "
                         "literal backslash as `\\\\`)") from exc


def _check_regex(name: str, pattern: str) -> None:
    """Raise ValueError (the loader adds file:line) for a pattern Python cannot compile, or
    one whose matching time can grow exponentially with the file (a repeat inside a repeat)."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"`{name}` = {pattern!r} is not a valid regular expression: {exc} "
                         "(Python `re` syntax; escape literal `(`, `[`, `+`, `*` with a "
                         "backslash, or leave the regex option off)") from exc
    nested = _nested_repeat(sre_parse.parse(pattern).data, inside=False)
    if nested:
        raise ValueError(
            f"`{name}` = {pattern!r} repeats a part that itself repeats ({nested}): Python's "
            "backtracking `re` can take exponential time on such a pattern, and `patch` hung "
            "on `(a+)+$` (issue 27); repeat the inner part only (`a+` instead of `(a+)+`), or "
            "make the outer repeat possessive (`(a+)++`) or atomic (`(?>a+)+`)")


#: Repeat opcodes that backtrack; a possessive repeat or an atomic group never does.
_REPEATS = (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT)


def _nested_repeat(items: list[Any], *, inside: bool) -> str:
    """A description of the first ambiguous nested repeat ("" when none): a repeat of a part
    made only of repeats, one of them unbounded or multiple (`(a+)+`, `(a|b+)*`, `(\\w+\\s*)+`).
    Such a part splits one run of text into iterations in exponentially many ways, and a
    backtracking engine tries them all before it fails. A part with a required character of
    its own (`(x\\s*)+`, `(,\\s*\\w+)*`) splits the text one way only, so it passes."""
    for op, av in items:
        if op in _REPEATS:
            low, high, body = av
            if high > 1 and _only_repeats(body.data) and _has_repeat(body.data):
                top = "" if high == sre_constants.MAXREPEAT else str(high)
                return f"a `{{{low},{top}}}` repeat of a part that is only repeats"
            children = [body.data]
        elif op == sre_constants.SUBPATTERN:
            children = [av[3].data]
        elif op == sre_constants.BRANCH:
            children = [b.data for b in av[1]]
        elif op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
            children = [av[1].data]
        else:
            children = []
        for child in children:
            found = _nested_repeat(child, inside=inside)
            if found:
                return found
    return ""


def _only_repeats(items: list[Any]) -> bool:
    """Whether every character `items` matches comes from a backtracking repeat."""
    for op, av in items:
        if op in _REPEATS or op == sre_constants.AT:
            continue
        if op == sre_constants.SUBPATTERN and _only_repeats(av[3].data):
            continue
        if op == sre_constants.BRANCH and any(_only_repeats(b.data) for b in av[1]):
            continue
        return False
    return True


def _has_repeat(items: list[Any]) -> bool:
    """Whether `items` holds a backtracking repeat that can match more than once."""
    for op, av in items:
        if op in _REPEATS and av[1] > 1:
            return True
        if op == sre_constants.SUBPATTERN and _has_repeat(av[3].data):
            return True
        if op == sre_constants.BRANCH and any(_has_repeat(b.data) for b in av[1]):
            return True
    return False


@dataclass(frozen=True, kw_only=True)
class InsertBlockParams:
    """Parameters of `insert-block`."""

    file: str
    """The file to edit (relative to the tree root)."""
    anchor: str
    """A whole line: literal (compared without surrounding whitespace) or, with
    `anchor_regex`, a regex that must match the whole line."""
    anchor_regex: bool = False
    """Treat `anchor` as a regular expression."""
    where: Literal["before", "after"] = "after"
    """Insert before or after the anchor line."""
    block: str = ""
    """The text to insert (written in the file's line-ending style)."""
    block_file: str = ""
    """Or: a file holding the text (relative to the recipe; the engine passes it resolved)."""
    expect: int = 1
    """Expected number of anchor lines."""

    def __post_init__(self) -> None:
        if self.anchor_regex:
            _check_regex("anchor", self.anchor)


@dataclass(frozen=True, kw_only=True)
class ReplaceBlockParams:
    """Parameters of `replace-block`."""

    file: str
    """The file to edit (relative to the tree root)."""
    anchor: str
    """The first line of the replaced region (literal, or a regex with `anchor_regex`)."""
    end_anchor: str = ""
    """The last line of the replaced region (inclusive); unset: only the anchor line."""
    anchor_regex: bool = False
    """Treat `anchor` and `end_anchor` as regular expressions matching whole lines."""
    block: str = ""
    """The replacement text (written in the file's line-ending style)."""
    block_file: str = ""
    """Or: a file holding the text (relative to the recipe; the engine passes it resolved)."""
    expect: int = 1
    """Expected number of regions."""

    def __post_init__(self) -> None:
        if self.anchor_regex:
            _check_regex("anchor", self.anchor)
            if self.end_anchor:
                _check_regex("end_anchor", self.end_anchor)


@dataclass(frozen=True, kw_only=True)
class ReplaceFileParams:
    """Parameters of `replace-file`."""

    path: str
    """The file in the tree to replace (it may not exist yet)."""
    from_file: str
    """The new content: a file relative to the recipe (the engine passes it resolved). Its
    bytes are used as they are, line endings included."""
    expect: int = 1
    """Expected number of sites (1; 0 makes a missing `from_file` … an error anyway)."""


# --------------------------------------------------------------------------- exclude-sources

@dataclass(frozen=True, kw_only=True)
class ExcludeSourcesParams:
    """Parameters of `exclude-sources`."""

    globs: tuple[str, ...]
    """Sources to leave out, relative to the tree root (`sm90/**`, `kernels/fp8_*.cu`)."""
    cmake_lists: tuple[str, ...] = ()
    """CMakeLists.txt files whose explicit source lists are edited too."""
    setup_py: tuple[str, ...] = ()
    """setup.py files whose `sources=[…]` lists are edited too."""
    expect: int | Mapping[str, int] | None = None
    """Expected number of excluded files in the tree. Unset: at least one."""


declare(TransformSpec(
    "explicit-instantiations", ExplicitInstantiationsParams,
    "guard (`#if !defined(_MSC_VER)`) or remove explicit template instantiations"))
declare(TransformSpec(
    "dynamic-loading", DynamicLoadingParams,
    "portable dlopen (compat header + plugin exports) or stubbed dispatcher"))
declare(TransformSpec("macro-edit", MacroEditParams,
                      "find/replace inside #if/#elif conditions and #define bodies"))
declare(TransformSpec("insert-block", InsertBlockParams,
                      "insert a block of text before/after an anchor line"))
declare(TransformSpec("replace-block", ReplaceBlockParams,
                      "replace the lines from an anchor to an end anchor"))
declare(TransformSpec("replace-file", ReplaceFileParams,
                      "replace a whole file with one shipped next to the recipe"))
declare(TransformSpec(
    "exclude-sources", ExcludeSourcesParams,
    "leave sources out of the build (and of CMake / setup.py source lists)"))
