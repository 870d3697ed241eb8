"""Which recipe `flashbuild build TREE` uses when no `--recipe` is given (zero-config build).

1. `--recipe` wins, always.
2. A bundled recipe whose `[identity]` matches the tree by content: the package it ships and
   marker files only that project has (recipes/model.py `Recipe.matches`), never the folder's
   name: a clone renamed `cc1d` is still causal-conv1d, and a tree called `csrc` that is not
   flashbuild's kernel library is not the `csrc` recipe.
3. Otherwise a draft, made exactly as `flashbuild recipe init` makes one (scanning/draft.py
   `run_init`, the same function), written into the build root for review
   (`<build root>/<name>.draft.toml`) and loaded like any recipe file. Its decisions are said
   in a few lines. A TODO the build cannot do without (no `[install]` while installing, no
   artifact for a CMake tree) stops the build with the TODO's own text; the others are listed.

A draft is made once per tree state: a key file beside it (the tree's files by size and mtime,
the target, flashbuild's version) lets an unchanged re-run load it without scanning again. A
draft the user edited (its bytes are not what flashbuild wrote) is used as it is and never
overwritten; to start over, delete it.
No `--recipe` and no tree builds the bundled kernel library (`csrc`), as before.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from flashbuild import __version__, buildsystems
from flashbuild.building import staging
from flashbuild.errors import BusyError, FlashbuildError, RecipeError, TreeError, UsageError
from flashbuild.installing import shim
from flashbuild.installing.manifest import MANIFEST_NAME
from flashbuild.outputs import write_no_follow
from flashbuild.patching.journal import Lock
from flashbuild.patching.plan import plan_steps
from flashbuild.recipes.load import bundled_for, load_recipe, source_tree
from flashbuild.recipes.when import WhenContext, evaluate

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from pathlib import Path

    from flashbuild.arch import BuildTarget
    from flashbuild.building.progress import IncludeStep
    from flashbuild.recipes.model import Recipe
    from flashbuild.scanning.findings import ScanResult

DEFAULT_RECIPE = "csrc"
_TODO = re.compile(r"^# TODO: \[(?P<table>[\w.]+)\] (?P<what>.*)$")


@dataclass(frozen=True)
class Todo:
    """A `# TODO: [table]` block of a draft."""

    table: str
    what: str
    evidence: str = ""
    fix: str = ""

    def line(self) -> str:
        return f"[{self.table}] {self.what}" + (f" (fix: {self.fix})" if self.fix else "")


@dataclass(frozen=True)
class Chosen:
    recipe: Recipe
    tree: Path
    how: str
    """`--recipe`, `bundled` (matched by [identity]), `drafted`, or `default`."""
    draft: Path | None = None
    """The draft file (drafted only)."""
    todos: tuple[Todo, ...] = field(default=())
    """The draft's TODOs that do not block the build."""

    def to_json(self) -> dict[str, object]:
        return {"recipe": self.recipe.name, "how": self.how,
                "draft": str(self.draft) if self.draft else None,
                "todos": [t.line() for t in self.todos]}


#: Part of a draft's key: raised whenever drafting changes what it writes (a development
#: build keeps its version string), so a tree is drafted again instead of reusing an old draft.
DRAFT_FORMAT = 3


def choose_recipe(recipe: str | None, source: Path | None, *, arch: BuildTarget, platform: str,
                  installing: bool, build_root: Path, say: Callable[[str], None]) -> Chosen:
    """The recipe and the tree for `flashbuild build` (see the module docstring)."""
    if recipe is not None or source is None:
        loaded = load_recipe(recipe or DEFAULT_RECIPE)
        return Chosen(loaded, source_tree(loaded, source),
                      "--recipe" if recipe is not None else "default")
    tree = source.resolve()
    if tree.is_file() and tree.suffix == ".toml":
        raise UsageError(f"{source} is a recipe file, not a tree",
                         evidence="`flashbuild build PATH` takes the folder to build",
                         fix=f"pass the recipe with `--recipe {source}` (and the tree, if the "
                         "recipe's [source] path is not it, as PATH)")
    if not tree.is_dir():
        raise TreeError(f"the source tree {tree} does not exist or is not a folder",
                        fix="give the folder of the project to build: `flashbuild build PATH "
                        "--arch ...`")
    from flashbuild.building.treecheck import refuse_missing_submodules  # noqa: PLC0415  # start-up

    # A plain clone without its submodules is refused before a recipe is chosen or drafted
    # for it: a bundled recipe matches such a clone by content too.
    refuse_missing_submodules(tree, platform=platform, archs=arch.archs)
    bundled = bundled_match(tree)
    if bundled is not None:
        say(bundled.using())
        return Chosen(bundled.recipe, tree, "bundled")
    return _drafted(tree, arch=arch, platform=platform, installing=installing,
                    build_root=build_root, say=say)


@dataclass(frozen=True)
class Bundled:
    """The bundled recipe whose `[identity]` matches a tree by content, and why it matches."""

    recipe: Recipe
    why: str
    """`the tree ships the `pkg` package and a, b, c` (the identity's package and markers)."""

    def using(self) -> str:
        return f"using the bundled recipe `{self.recipe.name}`: {self.why}"


def bundled_match(tree: Path) -> Bundled | None:
    """The one content match every command uses (build, patch, scan, recipe init): the
    bundled recipe whose `[identity]` matches `tree` (recipes/load.py `bundled_for`)."""
    bundled = bundled_for(tree)
    if bundled is None:
        return None
    ident = bundled.identity
    assert ident is not None
    return Bundled(bundled, f"the tree ships the `{ident.package}` package and "
                   f"{', '.join(ident.markers)}")


def choose_for_patch(recipe: str | None, source: Path | None, *, revert: bool,
                     say: Callable[[str], None]) -> tuple[Recipe | None, Path]:
    """The recipe and tree `flashbuild patch` uses, chosen as `flashbuild build` chooses (see
    the module docstring), and said in one line. Unlike build, patch never uses a draft: it
    writes into the tree itself, so a recipe nobody has reviewed is refused; without a
    bundled match the error says how to draft one. `--revert` of a given tree needs no recipe
    (the tree's journal says what to restore): None then."""
    if recipe is not None or source is None:
        loaded = load_recipe(recipe or DEFAULT_RECIPE)
        tree = source_tree(loaded, source)
        if recipe is not None:
            say(f"using the recipe `{loaded.name}` (--recipe {recipe}) on {tree}")
        else:
            say(f"using the bundled recipe `{DEFAULT_RECIPE}` (no tree and no --recipe: "
                f"flashbuild's own kernel library) on {tree}")
        return loaded, tree
    tree = source.resolve()
    if tree.is_file() and tree.suffix == ".toml":
        raise UsageError(f"{source} is a recipe file, not a tree",
                         evidence="`flashbuild patch PATH` takes the folder to patch",
                         fix=f"pass the recipe with `--recipe {source}`")
    if not tree.is_dir():
        raise TreeError(f"the source tree {tree} does not exist or is not a folder",
                        fix="give the folder of the tree to patch: `flashbuild patch PATH`")
    if revert:
        say(f"reverting {tree} from its own journal (.flashbuild/)")
        return None, tree
    bundled = bundled_match(tree)
    if bundled is None:
        raise RecipeError(
            f"no bundled recipe matches {tree}, and `flashbuild patch` does not patch a "
            "tree with a recipe nobody reviewed",
            evidence="a bundled recipe is chosen by the tree's content ([identity]: its "
            "package and marker files); `flashbuild build` drafts a recipe for such a tree, "
            "but it patches a mirror of the tree, while patch writes into the tree itself",
            fix=f"draft one and review it: `flashbuild recipe init --source {source} -o "
            f"my.toml`, then `flashbuild patch {source} --recipe my.toml`")
    say(bundled.using())
    return bundled.recipe, tree


def _drafted(tree: Path, *, arch: BuildTarget, platform: str, installing: bool, build_root: Path,
             say: Callable[[str], None]) -> Chosen:
    name = re.sub(r"[^a-z0-9-]+", "-", tree.name.lower()).strip("-") or "tree"
    draft = build_root / f"{name}.draft.toml"
    key_file = _key_file(draft)
    key = _tree_key(tree, arch=arch, platform=platform, skip=build_root)
    stored = _read_json(key_file)
    text = draft.read_bytes() if draft.is_file() else None
    edited = (text is not None and stored is not None
              and stored.get("written") != hashlib.sha256(text).hexdigest())
    todos: list[Todo] | None = None
    if edited:
        say(f"using the draft {draft} as you edited it (delete it to draft again)")
    elif text is None or stored is None or stored.get("key") != key:
        # Imported here: the scanner and introspection are 75 ms of imports that a re-run
        # reusing its draft does not need.
        from flashbuild.pipeline.introspect import introspect_for_draft  # noqa: PLC0415  # cycle
        from flashbuild.scanning.draft import (  # noqa: PLC0415  # start-up
            draft_tree,
            shown_todos,
        )

        build_root.mkdir(parents=True, exist_ok=True)
        say(f"no --recipe and no bundled recipe for {tree}: drafting one as `flashbuild "
            "recipe init` does")
        # One drafting run per build folder: two zero-config builds of one fresh tree raced on
        # the introspection folder, and one exited 6 with a misleading compiler error.
        with _drafting_lock(build_root, tree):
            # Exactly as `recipe init` drafts: checked against the configured build (targets
            # this configuration defines, the tree's arch variable, [install]) where it can.
            drafted = draft_tree(tree, platform=platform, arch=arch, output=draft,
                                 as_json=False, introspect=introspect_for_draft,
                                 plan=plan_steps)
        # The TODOs as drafting typed them, not read back out of the draft's comments; kept
        # beside the key for a run that reuses the draft.
        todos = [Todo(*shown) for shown in shown_todos(drafted)]
        written = hashlib.sha256(draft.read_bytes()).hexdigest()
        with contextlib.suppress(OSError):  # a missing key only costs drafting again
            write_no_follow(key_file, json.dumps(
                {"key": key, "written": written,
                 "todos": [dataclasses.asdict(t) for t in todos]}).encode())
    elif stored is not None:
        todos = _stored_todos(stored.get("todos"))
    loaded = load_recipe(draft)
    if todos is None:
        # A draft the user edited (or a key written before the TODOs were kept): its TODOs
        # are what its text says now.
        todos = parse_todos(draft.read_text(encoding="utf-8"))
    blocking = [t for t in todos if blocks(t, loaded, installing=installing)]
    if blocking:
        raise RecipeError(
            f"the drafted recipe cannot build this tree yet: {blocking[0].what}",
            evidence="\n".join(f"- [{t.table}] {t.what}" + (f" ({t.evidence})" if t.evidence
                                                          else "") for t in blocking)
            + f"\ndraft: {draft}",
            fix=(blocking[0].fix + "; " if blocking[0].fix else "") + "complete the draft "
            f"and build with `--recipe {draft}`" + (
                ", or build without installing (`--install none`)"
                if any(t.table == "install" for t in blocking) else ""),
            details={"draft": str(draft), "todos": [t.line() for t in blocking]})
    for line in describe(loaded, draft):
        say(line)
    rest = tuple(t for t in todos if t not in blocking)
    for todo in rest[:4]:
        say(f"  TODO {todo.line()}")
    if len(rest) > 4:
        say(f"  … and {len(rest) - 4} more TODO(s) in the draft")
    return Chosen(loaded, tree, "drafted", draft=draft, todos=rest)


def add_to_draft(chosen: Chosen, steps: Sequence[IncludeStep]) -> Chosen | None:
    """`chosen` with `steps` appended to its draft file (and the draft's key told, so a re-run
    reuses it as flashbuild's own). None when `chosen` is not a draft flashbuild wrote (a
    `--recipe`, a bundled recipe, a draft the user edited: those are the user's, and the
    build's paragraph shows the steps instead) or when the draft has every step already."""
    if chosen.how != "drafted" or chosen.draft is None:
        return None
    draft = chosen.draft
    key_file = _key_file(draft)
    stored = _read_json(key_file)
    try:
        text = draft.read_bytes()
    except OSError:
        return None
    if stored is None or stored.get("written") != hashlib.sha256(text).hexdigest():
        return None
    have = {step.id for step in chosen.recipe.patch}
    new = [step for step in steps if step.id not in have]
    if not new:
        return None
    block = "".join(
        f"\n# Added by `flashbuild build`: GCC said {step.file} uses {step.name} without "
        f"including <{step.header}>.\n{step.toml()}\n" for step in new)
    amended = text.rstrip(b"\n") + b"\n" + block.encode("utf-8")
    write_no_follow(draft, amended)
    stored["written"] = hashlib.sha256(amended).hexdigest()
    with contextlib.suppress(OSError):  # a missing key only costs drafting again
        write_no_follow(key_file, json.dumps(stored).encode())
    return dataclasses.replace(chosen, recipe=load_recipe(draft))


def describe(recipe: Recipe, draft: Path) -> list[str]:
    """The draft's decisions in a few lines."""
    build = recipe.build
    lines = [f"drafted {draft.name} (review it: {draft})"]
    what = f"backend {build.backend}"
    if buildsystems.get(build.backend).compiles_cmake_targets:
        what += f", CMake source {build.cmake_source}"
        if build.targets:
            what += f", targets {', '.join(build.targets)}"
    sets = {k: v for env in build.env for k, v in env.set.items()}
    if sets:
        what += "; sets " + ", ".join(f"{k}={v}" for k, v in sets.items())
    lines.append("  " + what)
    if recipe.install is not None:
        lines.append(f"  installs {recipe.install.describe()}"
                     + (f"; artifacts {', '.join(a.name for a in recipe.artifact)}"
                        if recipe.artifact else ""))
    steps = [s.id for s in recipe.patch]
    lines.append(f"  {len(steps)} patch step(s)" + (f": {', '.join(steps)}" if steps else ""))
    return lines


def _stored_todos(value: object) -> list[Todo] | None:
    """The TODOs a drafting run kept in the key file; None when they are not there or not
    readable (the draft's text is read instead)."""
    if not isinstance(value, list):
        return None
    todos: list[Todo] = []
    for item in value:
        if not isinstance(item, dict) or set(item) != {"table", "what", "evidence", "fix"} \
                or not all(isinstance(v, str) for v in item.values()):
            return None
        todos.append(Todo(**item))
    return todos


def parse_todos(text: str) -> list[Todo]:
    """The `# TODO: [table] what` blocks of a draft, with their evidence and fix lines (the
    finding TODOs, `# TODO: FB…`, are the scan's and are reported by `flashbuild scan`)."""
    todos: list[Todo] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _TODO.match(line)
        if m is None:
            continue
        extra: dict[str, str] = {}
        for follow in lines[i + 1:i + 4]:
            sub = re.match(r"^#\s+(evidence|fix):\s*(.*)$", follow)
            if sub is None:
                break
            extra[sub[1]] = sub[2].strip()
        todos.append(Todo(m["table"], m["what"].strip(), extra.get("evidence", ""),
                          extra.get("fix", "")))
    return todos


def blocks(todo: Todo, recipe: Recipe, *, installing: bool) -> bool:
    """Whether the build cannot run without what this TODO asks for: the table it names is
    missing from the draft and the build needs it."""
    needs_artifacts = buildsystems.get(recipe.build.backend).installs_recipe_artifacts
    if todo.table == "install":
        return installing and recipe.install is None
    if todo.table == "source":
        return True  # a source file the build compiles is not in the tree
    if todo.table == "artifact":
        return needs_artifacts and not recipe.artifact
    if todo.table == "build":
        # A setup.py that builds nothing as run is why there is no [install]: said first.
        return (needs_artifacts and not recipe.artifact and (
            "CMakeLists" in todo.what or "builds no native code" in todo.what)) or (
            installing and recipe.install is None and "kernels at run time" in todo.what)
    return False


#: What `--install inplace` writes into a tree: not an input of the draft.
_INSTALLED = (".so", ".pyd", ".dll", ".dylib", f"{shim.SHIM_MODULE}.py", MANIFEST_NAME)


@contextlib.contextmanager
def _drafting_lock(build_root: Path, tree: Path) -> Iterator[None]:
    """The patch lock (pid, start time, host; stale locks taken over), taken on the build
    folder: a second run is exit 9 saying another run is drafting, not patching."""
    lock = Lock(build_root)
    try:
        lock.acquire()
    except BusyError as exc:
        raise BusyError(f"another flashbuild run is drafting a recipe for {tree.name} in "
                        f"this build folder", evidence=f"{exc.what}; {exc.evidence}",
                        fix="wait for that run to finish and run again (it reuses the draft), "
                        "or pass another --build-dir") from exc
    try:
        yield
    finally:
        lock.release()


def _tree_key(tree: Path, *, arch: BuildTarget, platform: str, skip: Path) -> str:
    """The tree's state as the draft sees it: every file by size and mtime, except what an
    in-place install writes (binaries, the shim, the manifest; an `__init__.py` by its
    content without the shim block), so building does not make the next run draft again."""
    scanned = staging.scan(tree, skip=[skip], reuse=True)
    h = hashlib.sha256(json.dumps([__version__, DRAFT_FORMAT, arch.names(), platform,
                                   str(tree)]).encode())
    for rel in sorted(scanned.files):
        if rel.endswith(_INSTALLED):
            continue
        st = scanned.files[rel]
        if rel.rsplit("/", 1)[-1] == "__init__.py":
            try:
                text = shim.remove((tree / rel).read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, FlashbuildError):
                text = str(st.st_mtime_ns)
            h.update(f"{rel}\0{hashlib.sha256(text.encode()).hexdigest()}\n"
                     .encode(errors="surrogateescape"))
            continue
        # surrogateescape: a file name that is not UTF-8 (kept by os.fsdecode as surrogates)
        # hashes as its own bytes instead of raising UnicodeEncodeError (issue 27).
        h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode(errors="surrogateescape"))
    return h.hexdigest()


def _key_file(draft: Path) -> Path:
    """The key kept beside a draft: what it was drafted from and the hash of what was written."""
    return draft.with_name(draft.name + ".key")


def _read_json(path: Path) -> dict[str, object] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def with_bundled(result: ScanResult) -> ScanResult:
    """The scan's result with the bundled recipe that matches the tree (`bundled_match`, as
    build and patch choose it): its steps for the scan's target are planned on the tree in
    memory (patching/plan.py, nothing written), and each finding on a line a step edits says
    so (`handled`, `handled_step`) and is at most a warning: `flashbuild build TREE` applies
    that step, so the finding does not fail the build (issue 28)."""

    from flashbuild.scanning.findings import RecipeMatch, Severity  # noqa: PLC0415  # start-up

    root = result.root.resolve()
    bundled = bundled_match(root) if root.is_dir() else None
    if bundled is None:
        return result
    target = result.target
    archs = tuple(a.sm for a in target.archs)
    ctx = WhenContext(platform=target.platform, arch=target.spec)
    steps = [s for s in bundled.recipe.patch if evaluate(s.when, ctx).matched]
    edits: dict[tuple[str, int], str] = {}
    unplanned: list[str] = []
    for step in steps:
        if step.transform is None:
            continue  # a unified diff: its hunks are not matched to findings (yet)
        # One step at a time: a step this tree refuses (upstream moved) leaves the others'
        # edits standing, and says why.
        alone = dataclasses.replace(bundled.recipe, patch=(step,))
        try:
            for changes, _sites, refused in plan_steps(alone, root, target.platform, archs):
                for rel, new in changes.items():
                    for line in edited_lines(_text(root / rel), new):
                        edits.setdefault((rel, line), step.id)
                unplanned += [f"{step.id}: refused {why}" for why in refused]
        except FlashbuildError as exc:
            unplanned.append(f"{step.id}: {exc.what}")
    name = bundled.recipe.name
    findings = []
    for found in result.findings:
        f = found
        step_id = edits.get((f.path, f.line))
        if step_id is not None and not f.handled:
            f = dataclasses.replace(
                f, handled=f"the bundled recipe `{name}` edits this line (step `{step_id}`); "
                "`flashbuild build` applies it", handled_step=step_id,
                severity=Severity.WARNING if f.severity is Severity.ERROR else f.severity)
        findings.append(f)
    return dataclasses.replace(result, findings=tuple(findings), recipe=RecipeMatch(
        name=name, why=bundled.why, steps=len(steps), unplanned=tuple(unplanned)))


def edited_lines(old: str, new: str) -> set[int]:
    """The 1-based lines of `old` that `new` replaces or deletes, and the two lines around
    each insertion (a guard wrapped around a line, `#if` before and `#endif` after, edits it
    without changing its text)."""
    lines: set[int] = set()
    matcher = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines(), autojunk=False)
    for tag, i1, i2, _j1, _j2 in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            lines.update(range(i1 + 1, i2 + 1))
        elif tag == "insert":
            lines.update((i1, i1 + 1))
    return lines


def _text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return ""
