"""The trees' own tests that their sdists leave out, as archives for bench/trees.py --tests,
and the trees whose source is a repository commit.

    python bench/tree_tests.py --mirrors DIR [--list bench/trees.toml] [--out DIR] [--only a,b]

For each tree of the list with `tests_from = "OWNER/NAME@COMMIT:PATH[,PATH...]"`: `git archive`
of those paths at that commit, from a clone of github.com/OWNER/NAME under --mirrors (as
DIR/OWNER+NAME/repo or DIR/OWNER+NAME; a bare clone will do), written to OUT/TREE.tar.gz
(.devcarry/tests/, git-excluded, carried to the GPU machine). The harness unpacks it into the
unpacked tree before the tree's `tests` command, and refuses --tests while one is missing.

For each tree with `source = "git:OWNER/NAME@COMMIT"`: `git archive` of the whole commit,
under one folder, with its GitHub submodules at their pinned commits from their own clones
under DIR (what `git clone --recursive` checks out), written to
.devcarry/trees/NAME-COMMIT12.tar.gz (where bench/gpu_trees.sh takes the sdists from; copy it
into the harness's WORK/dl to run it here).

    python bench/tree_tests.py --trim DL

For each tree with `carry_drop` (an sdist larger than a device call carries): its sdist from
DL (the harness's WORK/dl) without those paths, written to .devcarry/trees/ as
NAME-VERSION-carry.tar.gz; the harness's fetch stage says when it unpacked such a copy.
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from trees import (
    ARCHIVES,
    CARRY_SUFFIX,
    TestsFrom,
    Tree,
    git_source,
    load_list,
    parse_tests_from,
    sdist,
    tests_archive,
)

#: Where the source archives of `git:` trees go (bench/gpu_trees.sh copies them to WORK/dl).
SOURCES = ARCHIVES.parent / "trees"


def mirror_gitdir(mirrors: Path, repo: str) -> Path | None:
    """The git directory of `repo`'s clone under `mirrors`, or None."""
    folder = mirrors / repo.replace("/", "+")
    for candidate in (folder / "repo", folder / "repo" / ".git", folder / ".git", folder):
        if (candidate / "HEAD").is_file() and (candidate / "objects").is_dir():
            return candidate
    return None


def archive_argv(gitdir: Path, spec: TestsFrom, target: Path) -> list[str]:
    """`git archive` of the spec's paths at its commit, gzipped, into `target`."""
    return ["git", "--git-dir", str(gitdir), "archive", "--format=tar.gz", "-o", str(target),
            spec.commit, "--", *spec.paths]


def make_archive(tree: Tree, *, mirrors: Path, out: Path) -> str:
    """Write the tree's tests archive; "" when written, else why not."""
    spec = parse_tests_from(tree.tests_from)
    gitdir = mirror_gitdir(mirrors, spec.repo)
    if gitdir is None:
        return (f"no clone of {spec.repo} under {mirrors} (looked for "
                f"{spec.repo.replace('/', '+')}/repo and {spec.repo.replace('/', '+')}); "
                f"git clone --bare https://github.com/{spec.repo} "
                f"{mirrors / spec.repo.replace('/', '+')}")
    target = tests_archive(tree, out)
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(archive_argv(gitdir, spec, target), capture_output=True, text=True,
                          check=False, timeout=600)
    if done.returncode != 0:
        target.unlink(missing_ok=True)
        return f"git archive exited {done.returncode}: {done.stderr.strip()}"
    return ""


def submodules(gitdir: Path, commit: str) -> list[tuple[str, str, str]]:
    """The commit's git submodules as (path, OWNER/NAME, pinned commit), from its gitlinks
    and .gitmodules; a submodule whose URL is not on GitHub is left out (no mirror names it)."""
    listed = subprocess.run(["git", "--git-dir", str(gitdir), "ls-tree", "-r", commit],
                            capture_output=True, text=True, check=True, timeout=600).stdout
    pinned = {}
    for line in listed.splitlines():
        meta, _, path = line.partition("\t")
        mode, kind, sha = meta.split()
        if mode == "160000" and kind == "commit":
            pinned[path] = sha
    if not pinned:
        return []
    config = subprocess.run(
        ["git", "--git-dir", str(gitdir), "config", "--blob", f"{commit}:.gitmodules",
         "--get-regexp", r"^submodule\..*\.(path|url)$"],
        capture_output=True, text=True, check=True, timeout=60).stdout
    fields: dict[str, dict[str, str]] = {}
    for line in config.splitlines():
        key, _, value = line.partition(" ")
        name, _, field = key.removeprefix("submodule.").rpartition(".")
        fields.setdefault(name, {})[field] = value
    found = []
    for entry in fields.values():
        path, url = entry.get("path", ""), entry.get("url", "")
        repo = _GITHUB_URL.fullmatch(url)
        if path in pinned and repo:
            found.append((path, repo["repo"], pinned[path]))
    return found


#: A GitHub clone URL (https or ssh, with or without .git): its OWNER/NAME.
_GITHUB_URL = re.compile(r"(?:https://github\.com/|git@github\.com:)(?P<repo>[\w.-]+/[\w.-]+?)"
                         r"(?:\.git)?/?")


def make_source(tree: Tree, *, mirrors: Path, out: Path) -> str:
    """Write a `git:` tree's source archive, with its git submodules at their pinned commits
    (what `git clone --recursive` checks out); "" when written, else why not."""
    repo, commit, name = git_source(tree.source.partition(":")[2], tree.subdir)
    gitdir = mirror_gitdir(mirrors, repo)
    if gitdir is None:
        return f"no clone of {repo} under {mirrors}"
    top = name.removesuffix(".tar.gz")
    # A tree that is one folder of its repository (`subdir`) is archived alone, with the
    # submodules under it: the rest is not the tree, and a mirror may lack a large file's
    # blob there. `carry_drop` leaves paths out too.
    only = [tree.subdir] if tree.subdir else ["."]
    parts = [(gitdir, commit, f"{top}/",
              [*only, *(f":(exclude){glob}" for glob in tree.carry_drop)])]
    for path, sub_repo, sub_commit in submodules(gitdir, commit):
        if tree.subdir and not f"{path}/".startswith(f"{tree.subdir.rstrip('/')}/"):
            continue
        sub_dir = mirror_gitdir(mirrors, sub_repo)
        if sub_dir is None:
            return (f"no clone of {sub_repo} (the submodule {path}) under {mirrors}")
        parts.append((sub_dir, sub_commit, f"{top}/{path}/", []))
    out.mkdir(parents=True, exist_ok=True)
    target = out / name
    with tempfile.TemporaryDirectory() as scratch, tarfile.open(target, "w:gz") as dst:
        for number, (source, at, prefix, pathspec) in enumerate(parts):
            piece = Path(scratch) / f"{number}.tar"
            done = subprocess.run(
                ["git", "--git-dir", str(source), "archive", "--format=tar",
                 f"--prefix={prefix}", "-o", str(piece), at,
                 *(["--", *pathspec] if pathspec else [])],
                capture_output=True, text=True, check=False, timeout=600)
            if done.returncode != 0:
                dst.close()
                target.unlink(missing_ok=True)
                return f"git archive of {at} exited {done.returncode}: {done.stderr.strip()}"
            with tarfile.open(piece) as src:
                for member in src:
                    # The outer archive's empty folder for a submodule is the one the
                    # submodule's own archive fills; tar keeps the last of a name.
                    dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    return ""


def dropped(member: str, globs: tuple[str, ...]) -> bool:
    """Whether an archive member (TOP/PATH) lies at or below one of the globs (on PATH)."""
    rel = member.partition("/")[2]
    parts = rel.split("/")
    return any(fnmatch.fnmatchcase("/".join(parts[:n]), glob)
               for glob in globs for n in range(1, len(parts) + 1))


def make_trimmed(tree: Tree, *, dl: Path, out: Path) -> Path:
    """Write the tree's sdist without its `carry_drop` paths; the file written."""
    pristine = sdist(tree.source.partition(":")[2], dl)
    out.mkdir(parents=True, exist_ok=True)
    target = out / (pristine.name.removesuffix(".tar.gz") + CARRY_SUFFIX)
    with tarfile.open(pristine) as src, tarfile.open(target, "w:gz") as dst:
        for member in src:
            if dropped(member.name, tree.carry_drop):
                continue
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    return target


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", type=Path, default=Path(__file__).with_name("trees.toml"))
    ap.add_argument("--mirrors", type=Path,
                    help="folder holding the clones, one OWNER+NAME folder each")
    ap.add_argument("--trim", type=Path, metavar="DL",
                    help="write the carried copies of the trees with carry_drop from the "
                         "sdists in DL")
    ap.add_argument("--out", type=Path, default=ARCHIVES)
    ap.add_argument("--only", default="", help="comma-separated tree names")
    args = ap.parse_args()
    listed = load_list(args.list)
    if args.trim:
        for tree in listed:
            if tree.carry_drop:
                target = make_trimmed(tree, dl=args.trim, out=SOURCES)
                print(f"{tree.name:<28} {target} ({target.stat().st_size} bytes)")
        return 0
    if args.mirrors is None:
        ap.error("--mirrors DIR (or --trim DL) is required")
    trees = [t for t in listed if t.tests_from]
    sources = [t for t in listed if t.source.startswith("git:")]
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {t.name for t in [*trees, *sources]}
        if unknown:
            raise SystemExit(f"no tests_from or git: source in {args.list}: "
                             f"{', '.join(sorted(unknown))}")
        trees = [t for t in trees if t.name in wanted]
        sources = [t for t in sources if t.name in wanted]
    failed = 0
    for tree in sources:
        why = make_source(tree, mirrors=args.mirrors, out=SOURCES)
        if why:
            failed += 1
            print(f"{tree.name:<28} FAILED {why}", file=sys.stderr)
        else:
            print(f"{tree.name:<28} {SOURCES / git_source(tree.source[4:], tree.subdir)[2]}")
    for tree in trees:
        why = make_archive(tree, mirrors=args.mirrors, out=args.out)
        if why:
            failed += 1
            print(f"{tree.name:<28} FAILED {why}", file=sys.stderr)
        else:
            size = tests_archive(tree, args.out).stat().st_size
            print(f"{tree.name:<28} {tests_archive(tree, args.out)} ({size} bytes)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
