"""The tree's git identity, seen from the staged mirror.

Many setup.py files version themselves from git: `git rev-parse --short HEAD` (FlashMLA),
`git describe --tags --dirty` (versioneer), setuptools_scm. The mirror in the build folder
(staging.py) has no `.git`, so in it those calls fail or find whatever repository encloses the
build folder, and a setup.py falls back to something else: FlashMLA to a timestamp, which pip's
metadata and wheel steps take at different seconds ("Built wheel ... is invalid").

Environment variables cannot carry the answer: versioneer drops GIT_DIR and setuptools_scm
drops every GIT_* variable before it runs git (both on purpose, for git hooks). So the mirror
gets a `.git` of its own, a file naming a small git folder in the build folder, `<build>/vcs`:

- `objects/info/alternates` names the tree's object store (read, never written);
- `HEAD` (the branch or the detached commit) and `packed-refs` (every ref, as
  `git for-each-ref` lists them) copied from the tree, `shallow` too when there is one;
- `index`: a copy of the tree's index, refreshed against the mirror. Files the patch changed
  are marked skip-worktree unless they differ from HEAD in the tree too, and so are tracked
  files the mirror leaves out (a tracked top-level `build/`), unless they are gone from the
  tree too: `--dirty` and setuptools_scm's dirty check answer as they do in the tree.

git run in the mirror then gives the tree's commit, tags, describe and dirtiness, and writes
only into `<build>/vcs`: nothing is written into the tree or its `.git`. The folder is rebuilt
only when the tree's HEAD, refs, index or the patched files change (a no-op build runs four
short git commands). A tree that is not the top of a git work tree (no git, a tarball, a
sub-folder of a larger repository) gets nothing; its setup.py's own fallback runs, and the
build hook keeps that version the same across pip's steps (resources/sitecustomize.py).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from flashbuild.building.request import StreamRunner

VCS_DIR = "vcs"
_KEY = "flashbuild-key.json"
_IDENTITY = "vcs-identity.json"
#: git must not take optional locks (index refreshes) in the user's repository.
_QUIET_GIT = {"GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0"}


@dataclass(frozen=True)
class GitIdentity:
    """What git says about the tree, and where the mirror's view of it lives."""

    head: str
    """The commit HEAD names."""
    branch: str | None
    """`refs/heads/x`, or None for a detached HEAD."""
    git_dir: Path
    """The mirror's git folder (`<build>/vcs`)."""


def _git_env(env: Mapping[str, str]) -> dict[str, str]:
    # The caller's GIT_DIR / GIT_WORK_TREE / GIT_INDEX_FILE would point git elsewhere.
    clean = {k: v for k, v in env.items() if not k.startswith("GIT_")}
    return {**clean, **_QUIET_GIT}


def _git(runner: StreamRunner, env: Mapping[str, str], cwd: Path, *args: str) -> str | None:
    done = runner.run(["git", *args], env=env, cwd=cwd, timeout=60, check=False)
    return done.stdout if done.ok else None


def link_git(tree: Path, mirror: Path, build_folder: Path, patched: Sequence[str], *,
             runner: StreamRunner, env: Mapping[str, str]) -> GitIdentity | None:
    """Give `mirror` the git identity of `tree` (see the module docstring); None when the tree
    is not the top of a git work tree or git is not installed."""
    gitfile = mirror / ".git"
    shadow = build_folder / VCS_DIR
    if runner.which("git", env) is None:
        _forget(gitfile, shadow)
        return None
    genv = _git_env(env)
    tree = tree.resolve()
    info = _git(runner, genv, tree, "rev-parse", "--show-toplevel", "--absolute-git-dir",
                "--git-common-dir", "--show-object-format")
    head = _git(runner, genv, tree, "rev-parse", "--verify", "-q", "HEAD")
    if info is None or head is None:
        _forget(gitfile, shadow)
        return None
    top, git_dir_text, common_text, object_format = info.splitlines()[:4]
    if Path(top).resolve() != tree:
        _forget(gitfile, shadow)  # a sub-folder of a repository: no stand-in for it
        return None
    git_dir = Path(git_dir_text)
    common = (tree / common_text).resolve() if not Path(common_text).is_absolute() \
        else Path(common_text)
    refs = _git(runner, genv, tree, "for-each-ref", "--format=%(objectname) %(refname)") or ""
    branch = _git(runner, genv, tree, "symbolic-ref", "-q", "HEAD")
    branch = branch.strip() if branch else None
    dirty = _git(runner, genv, tree, "diff", "--name-only", "HEAD", "--", *patched) \
        if patched else ""
    keep = sorted(set(patched) - set((dirty or "").splitlines()))
    index = git_dir / "index"
    key = json.dumps([head.strip(), branch, refs, object_format, str(common),
                      _stat_key(index), _stat_key(common / "shallow"), keep,
                      [_stat_key(mirror / p) for p in keep]])
    ident = GitIdentity(head=head.strip(), branch=branch, git_dir=shadow)
    # What a version can be made of; the index is not (staging a file changes no version).
    _write_if_changed(build_folder / _IDENTITY, json.dumps([head.strip(), branch, refs]))
    if _read(shadow / _KEY) == key and _read(gitfile) == _gitfile_text(shadow):
        return ident
    _build_shadow(shadow, common=common, head=branch or head.strip(), refs=refs,
                  object_format=object_format.strip(), index=index)
    _write_if_changed(gitfile, _gitfile_text(shadow))
    menv = {**genv, "GIT_DIR": str(shadow), "GIT_WORK_TREE": str(mirror)}
    tracked = (_git(runner, menv, mirror, "ls-files", "--", *keep) or "").splitlines() \
        if keep else []
    left_out = set((_git(runner, menv, mirror, "ls-files", "--deleted") or "").splitlines())
    if left_out:
        left_out -= set((_git(runner, genv, tree, "ls-files", "--deleted") or "").splitlines())
    skip = sorted({*tracked, *left_out})
    if skip:
        _git(runner, menv, mirror, "update-index", "--skip-worktree", "--", *skip)
    # Refresh the copied index against the mirror now, so git in the build reads it as is.
    _git(runner, menv, mirror, "update-index", "-q", "--refresh")
    (shadow / _KEY).write_text(key, encoding="utf-8")
    return ident


def _build_shadow(shadow: Path, *, common: Path, head: str, refs: str, object_format: str,
                  index: Path) -> None:
    if shadow.exists():
        shutil.rmtree(shadow)
    (shadow / "objects" / "info").mkdir(parents=True)
    (shadow / "refs" / "heads").mkdir(parents=True)
    (shadow / "refs" / "tags").mkdir()
    # Forward slashes: git reads them on every platform.
    (shadow / "objects" / "info" / "alternates").write_text(
        f"{(common / 'objects').as_posix()}\n", encoding="utf-8")
    (shadow / "HEAD").write_text(f"ref: {head}\n" if head.startswith("refs/") else f"{head}\n",
                                 encoding="utf-8")
    (shadow / "packed-refs").write_text(refs, encoding="utf-8")
    if object_format and object_format != "sha1":
        config = f"[core]\n\trepositoryformatversion = 1\n\tbare = false\n[extensions]\n" \
                 f"\tobjectformat = {object_format}\n"
    else:
        config = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n"
    (shadow / "config").write_text(config, encoding="utf-8")
    if (common / "shallow").is_file():
        shutil.copyfile(common / "shallow", shadow / "shallow")
    if index.is_file():
        shutil.copyfile(index, shadow / "index")


def _gitfile_text(shadow: Path) -> str:
    return f"gitdir: {shadow.as_posix()}\n"


def _stat_key(path: Path) -> list[int]:
    try:
        st = path.stat()
    except OSError:
        return []
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def _write_if_changed(path: Path, text: str) -> None:
    if _read(path) != text:
        path.write_text(text, encoding="utf-8")


def _forget(gitfile: Path, shadow: Path) -> None:
    for path in (gitfile, shadow / _KEY, shadow.parent / _IDENTITY):
        if path.is_file() or path.is_symlink():
            path.unlink()


def tree_identity(tree: Path, *, runner: StreamRunner, env: Mapping[str, str]) -> str:
    """What `link_git` would give a copy of `tree`, as a digest of its HEAD commit and refs,
    or "" when the tree is not the top of a git work tree: a model read from such a copy
    depends on it (a setup.py's version from `git rev-parse`), so its cache key does too. Not
    in it: the branch name at the same commit, and uncommitted edits (`--dirty`)."""
    if runner.which("git", env) is None:
        return ""
    genv = _git_env(env)
    info = _git(runner, genv, tree, "rev-parse", "--show-toplevel", "HEAD")
    if info is None or len(info.splitlines()) < 2 or \
            Path(info.splitlines()[0]).resolve() != tree.resolve():
        return ""
    refs = _git(runner, genv, tree, "for-each-ref", "--format=%(objectname) %(refname)") or ""
    return hashlib.sha256(f"{info}\0{refs}".encode()).hexdigest()


def identity_key(build_folder: Path) -> str:
    """What the mirror's git identity was built from ("" without one): the setuptools no-op
    stamp hashes it, so a new commit or tag (a new version) builds again."""
    return _read(build_folder / _IDENTITY) or ""
