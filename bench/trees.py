"""The tree harness: kernel trees flashbuild has never seen, one command each, measured.

    python bench/trees.py --list bench/trees.toml --arch sm_90a --work DIR [--only a,b]
                          [--until draft|build] [--tests] [--out DIR] [--timeout S]

For each tree of the list (a PyPI sdist `NAME==VERSION`, a tarball or a folder):

1. fetch    - the sdist from PyPI (kept in WORK/dl, reused) or the tarball, unpacked in WORK;
2. draft    - `flashbuild recipe init --draft` for this machine's OS and the arch, the recipe
              the zero-config build would use (its TODO count is in the row);
3. build    - `flashbuild build TREE --arch X --json`, no recipe, installing a wheel into the
              running Python (run the harness in a venv you throw away);
4. verify   - `flashbuild verify` of what the build installed;
5. import   - `python -c "import PKG"` from a folder outside the tree;
6. tests    - with --tests, the list's `tests` command in the tree (the GPU machine); a tree
              whose sdist lacks its tests names them in `tests_from`, and the archive
              bench/tree_tests.py made of them (.devcarry/tests/TREE.tar.gz) is unpacked into
              the tree first.

A stage runs only after the one before it passed. One row per tree: the last stage passed,
the exit code and seconds of each stage, and the first error's paragraph (what, evidence,
fix from flashbuild's JSON, or the last lines of a command's output). `--out` gets
`trees.json` and `trees.md` (the table docs/benchmarks.md carries) and each stage's output.
The torch each row used is recorded (a CPU torch cannot link a CUDA extension).

Trees are named in the list by where they come from, never special-cased in flashbuild.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
import urllib.parse
import urllib.request
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

STAGES = ("fetch", "draft", "build", "verify", "import", "tests")
#: Where bench/tree_tests.py writes the tests archives and the harness reads them (git-excluded,
#: carried to the GPU machine like .devcarry/trees/).
ARCHIVES = Path(__file__).resolve().parent.parent / ".devcarry" / "tests"
_TESTS_FROM = re.compile(r"(?P<repo>[\w.-]+/[\w.-]+)@(?P<commit>[0-9a-f]{40}):(?P<paths>.+)")


@dataclass(frozen=True)
class Tree:
    name: str
    #: `pypi:NAME==VERSION`, `tar:PATH` or `dir:PATH` (relative to the list's folder), or
    #: `git:OWNER/NAME@COMMIT` (a full commit id; `git archive` of it, written by
    #: bench/tree_tests.py into .devcarry/trees/ and read from WORK/dl).
    source: str
    #: The module to import after the install (the distribution's top-level package).
    module: str
    #: What the tree is an example of (setup.py switch, CMake backend option, ...).
    shape: str = ""
    #: Its own tests, run in the tree with --tests (a shell command).
    tests: str = ""
    #: Where those tests come from when the sdist lacks them: `OWNER/NAME@COMMIT:PATH[,PATH...]`
    #: (a GitHub repository, a full commit id, paths as in the repository).
    tests_from: str = ""
    #: Paths (globs, relative to the sdist's top folder) its build never reads, left out of the
    #: copy carried to the GPU machine when the sdist is over what a device call carries
    #: (`python bench/tree_tests.py --trim DL`, written as NAME-VERSION-carry.tar.gz).
    carry_drop: tuple[str, ...] = ()
    #: The folder of the source that is the tree (a repository whose kernels are one folder
    #: of it, with their own setup.py), relative to its top folder.
    subdir: str = ""


@dataclass(frozen=True)
class TestsFrom:
    """A parsed `tests_from`."""

    #: `OWNER/NAME` on GitHub.
    repo: str
    #: The full commit id the paths are taken from (the release's tag or version bump).
    commit: str
    #: Files or folders, relative to the repository's root; unpacked at the same place in the
    #: tree.
    paths: tuple[str, ...]


def parse_tests_from(text: str) -> TestsFrom:
    """`OWNER/NAME@COMMIT:PATH[,PATH...]`; ValueError saying what is wrong."""
    match = _TESTS_FROM.fullmatch(text)
    if not match:
        raise ValueError(f"{text!r} is not OWNER/NAME@COMMIT:PATH[,PATH...] "
                         "(COMMIT: the full 40-digit id)")
    paths = tuple(p.strip() for p in match["paths"].split(","))
    for path in paths:
        # The archive is unpacked into the tree: a path outside it would land elsewhere.
        if not path or path.startswith("/") or ".." in Path(path).parts:
            raise ValueError(f"{text!r}: {path!r} is not a path inside the repository")
    return TestsFrom(repo=match["repo"], commit=match["commit"], paths=paths)


_GIT_SOURCE = re.compile(r"(?P<repo>[\w.-]+/[\w.-]+)@(?P<commit>[0-9a-f]{40})")


def git_source(what: str, subdir: str = "") -> tuple[str, str, str]:
    """`OWNER/NAME@COMMIT` -> (repo, commit, archive file name); ValueError when malformed.
    A tree that is one folder of its repository (`subdir`) has that folder in the name: two
    trees of one commit (Pointcept's libs/pointops and libs/pointgroup_ops) are two archives."""
    match = _GIT_SOURCE.fullmatch(what)
    if not match:
        raise ValueError(f"{what!r} is not OWNER/NAME@COMMIT (COMMIT: the full 40-digit id)")
    name = match["repo"].split("/")[1]
    folder = f"-{re.sub(r'[^A-Za-z0-9]+', '-', subdir).strip('-')}" if subdir else ""
    return match["repo"], match["commit"], f"{name}-{match['commit'][:12]}{folder}.tar.gz"


def tests_archive(tree: Tree, archives: Path) -> Path:
    return archives / f"{tree.name}.tar.gz"


def missing_archives(trees: list[Tree], archives: Path) -> list[Path]:
    """The tests archives the trees' `tests_from` need that are not in `archives`."""
    return [tests_archive(t, archives) for t in trees
            if t.tests_from and not tests_archive(t, archives).is_file()]


def unpack_tests(archive: Path, root: Path) -> None:
    """The tests archive into the unpacked tree (its paths are the repository's)."""
    with tarfile.open(archive) as tf:
        tf.extractall(root, filter="data")


@dataclass
class Stage:
    name: str
    code: int
    seconds: float
    log: str = ""


@dataclass
class Row:
    tree: str
    source: str
    shape: str
    torch: str
    reached: str = "none"
    stages: list[Stage] = field(default_factory=list)
    error: str = ""
    todos: int | None = None


def load_list(path: Path) -> list[Tree]:
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    known = {f.name for f in dataclasses.fields(Tree)}
    trees = []
    for entry in doc.get("tree", []):
        name = entry.get("name", "?")
        unknown = sorted(set(entry) - known)
        if unknown:
            raise SystemExit(f"{path}: tree {name}: unknown keys {', '.join(unknown)} "
                             f"(known: {', '.join(sorted(known))})")
        tree = Tree(**{**entry, "carry_drop": tuple(entry.get("carry_drop", ()))})
        if tree.tests_from:
            try:
                parse_tests_from(tree.tests_from)
            except ValueError as exc:
                raise SystemExit(f"{path}: tree {name}: tests_from {exc}") from None
            if not tree.tests:
                raise SystemExit(f"{path}: tree {name}: tests_from without a tests command")
        trees.append(tree)
    names = [t.name for t in trees]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise SystemExit(f"{path}: tree names must be unique: {', '.join(sorted(dupes))}")
    return trees


def torch_version() -> str:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "none"


def _run(argv: list[str], *, cwd: Path, log: Path, timeout: float,
         env: dict[str, str] | None = None) -> tuple[int, float, str]:
    """Run, with stdout and stderr kept in `log`; (exit code, seconds, stdout)."""
    start = time.monotonic()
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                              env=env, check=False, start_new_session=True)
        code, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        code = 124
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        kept = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        err = f"{kept}\ntimed out after {timeout:.0f} s"
    log.write_text(f"$ {' '.join(argv)}\n--- stdout\n{out}\n--- stderr\n{err}\n",
                   encoding="utf-8")
    return code, time.monotonic() - start, out


def _paragraph(stdout: str, log: Path) -> str:
    """flashbuild's error paragraph from its JSON document, else the log's last lines."""
    try:
        doc = json.loads(stdout)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and doc.get("ok") is False:
        if isinstance(doc.get("checks"), list):
            # verify's report: no paragraph of its own, one line per failed check.
            failed = [c for c in doc["checks"]
                      if isinstance(c, dict) and c.get("status") == "fail"]
            return " / ".join(
                " ".join(p for p in (f"{c.get('subject', '')}: {c.get('summary', '')}.",
                                     str(c.get("evidence", "")),
                                     f"Fix: {c['fix']}" if c.get("fix") else "") if p)
                for c in failed) or "verify failed with no failed check in its report"
        parts = [str(doc.get("what", "")), str(doc.get("evidence", "")),
                 f"Fix: {doc['fix']}" if doc.get("fix") else ""]
        return " ".join(p.strip() for p in parts if p.strip()) or \
            "flashbuild said ok: false with no paragraph (" + str(log) + ")"
    lines = [ln for ln in log.read_text(encoding="utf-8").splitlines() if ln.strip()]
    return " / ".join(lines[-4:])


#: The name ending of an sdist trimmed for carrying (`carry_drop`).
CARRY_SUFFIX = "-carry.tar.gz"


def sdist(spec: str, cache: Path) -> Path:
    """The sdist of `NAME==VERSION`: from `cache` if it is there, else from PyPI's JSON API
    (checked against its sha256). Not `pip download`: that runs the setup.py for its metadata,
    and a tree whose setup.py needs nvcc or a CUDA torch would fail before flashbuild saw it."""
    name, _, version = spec.partition("==")
    if not version:
        raise SystemExit(f"{spec}: pin a version (NAME==VERSION)")
    stem = name.lower().replace("-", "_").replace(".", "_")
    cache.mkdir(parents=True, exist_ok=True)
    # The pristine sdist first; a trimmed copy (NAME-VERSION-carry.tar.gz, its carry_drop
    # paths left out) is what the GPU machine has instead.
    for have in sorted(cache.iterdir(), key=lambda p: p.name.endswith(CARRY_SUFFIX)):
        norm = have.name.lower().replace("-", "_").replace(".", "_")
        if norm.startswith(f"{stem}_{version.replace('.', '_')}") and \
                have.name.endswith((".tar.gz", ".zip", ".tgz")):
            return have
    index = f"https://pypi.org/pypi/{name}/json"
    with urllib.request.urlopen(index, timeout=60) as reply:
        files = json.load(reply)["releases"].get(version, [])
    found = [f for f in files if f["packagetype"] == "sdist"]
    if not found:
        raise FileNotFoundError(f"{spec} has no sdist on PyPI")
    target = cache / found[0]["filename"]
    # A mirror may answer with URLs relative to the index page.
    with urllib.request.urlopen(urllib.parse.urljoin(index, found[0]["url"]),
                                timeout=600) as reply:
        data = reply.read()
    if hashlib.sha256(data).hexdigest() != found[0]["digests"]["sha256"]:
        raise OSError(f"{target.name}: sha256 differs from PyPI's")
    target.write_bytes(data)
    return target


def fetch(tree: Tree, base: Path, work: Path, logs: Path) -> tuple[Stage, Path]:
    kind, _, what = tree.source.partition(":")
    dest = work / "src" / tree.name
    start = time.monotonic()
    if dest.is_dir():
        return Stage("fetch", 0, 0.0, "reused"), _top(dest)
    log = logs / f"{tree.name}.fetch.txt"
    try:
        if kind == "pypi":
            archive = sdist(what, work / "dl")
        elif kind == "tar":
            archive = (base / what).resolve()
        elif kind == "git":
            archive = work / "dl" / git_source(what, tree.subdir)[2]
            if not archive.is_file():
                raise OSError(f"no {archive}: write it with `python bench/tree_tests.py "
                              f"--mirrors DIR --only {tree.name}` and copy it there")
        elif kind == "dir":
            shutil.copytree((base / what).resolve(), dest / Path(what).name, symlinks=True)
            return Stage("fetch", 0, time.monotonic() - start), _top(dest)
        else:
            raise SystemExit(f"{tree.name}: unknown source kind {kind!r} (pypi:, tar:, dir:, git:)")
        dest.mkdir(parents=True)
        if archive.suffix == ".zip":
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(dest)
        else:
            with tarfile.open(archive) as tf:
                tf.extractall(dest, filter="data")
    except (OSError, tarfile.TarError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        log.write_text(f"{type(exc).__name__}: {exc}\n", encoding="utf-8")
        shutil.rmtree(dest, ignore_errors=True)
        return Stage("fetch", 1, time.monotonic() - start, str(log)), dest
    note = (f"the carried copy, without {', '.join(tree.carry_drop)}"
            if archive.name.endswith(CARRY_SUFFIX) else "")
    if kind == "git":
        note = "; ".join(filter(None, [note, _as_checkout(_top(dest), what, log)]))
    return Stage("fetch", 0, round(time.monotonic() - start, 1), note), _top(dest)


def _as_checkout(top: Path, what: str, log: Path) -> str:
    """A git tree's archive made what `git clone` gives a user: a checkout with one commit, so
    a setup.py that asks git for its version (`git rev-parse HEAD`, setuptools_scm) answers as
    in a clone. '' when done, else why not (the failed command's output is in `log`)."""
    git = shutil.which("git")
    if git is None:
        return "no git here: the tree is no checkout"
    env = {**os.environ, "GIT_AUTHOR_NAME": "harness", "GIT_AUTHOR_EMAIL": "harness@localhost",
           "GIT_COMMITTER_NAME": "harness", "GIT_COMMITTER_EMAIL": "harness@localhost"}
    for argv in ([git, "init", "-q"], [git, "add", "-A"],
                 [git, "commit", "-q", "--no-verify", "-m", f"snapshot of {what}"]):
        code, _seconds, _out = _run(argv, cwd=top, log=log, timeout=300, env=env)
        if code != 0:
            return f"`git {argv[1]}` failed ({log}): the tree is no checkout"
    return ""


def _top(dest: Path) -> Path:
    """The tree's top folder: the archive's one folder, or dest itself. `build/` beside that
    folder is flashbuild's build root from an earlier run of the harness (`<tree>/../build`),
    not a second top folder of the archive."""
    inside = [p for p in dest.iterdir() if not p.name.startswith(".") and p.name != "build"]
    return inside[0] if len(inside) == 1 and inside[0].is_dir() else dest


def run_tree(tree: Tree, *, base: Path, work: Path, logs: Path, arch: str, until: str,
             tests: bool, timeout: float, archives: Path = ARCHIVES) -> Row:
    row = Row(tree=tree.name, source=tree.source, shape=tree.shape, torch=torch_version())
    stage, root = fetch(tree, base, work, logs)
    row.stages.append(stage)
    if stage.code != 0:
        row.error = _paragraph("", logs / f"{tree.name}.fetch.txt")
        return row
    if tree.subdir:
        root = root / tree.subdir
        if not root.is_dir():
            row.error = f"the source has no folder {tree.subdir} (subdir)"
            return row
    row.reached = "fetch"
    fb = [sys.executable, "-m", "flashbuild"]
    platform = "windows" if os.name == "nt" else "linux"
    draft = work / "drafts" / f"{tree.name}.toml"
    draft.parent.mkdir(parents=True, exist_ok=True)
    log = logs / f"{tree.name}.draft.txt"
    code, seconds, out = _run([*fb, "recipe", "init", "--draft", "--source", str(root),
                               "--platform", platform, "--arch", arch, "-o", str(draft),
                               "--json"], cwd=work, log=log, timeout=timeout)
    row.stages.append(Stage("draft", code, round(seconds, 1), str(log)))
    if code != 0:
        row.error = _paragraph(out, log)
        return row
    row.reached = "draft"
    row.todos = draft.read_text(encoding="utf-8").count("# TODO")
    if until == "draft":
        return row
    log = logs / f"{tree.name}.build.txt"
    code, seconds, out = _run([*fb, "build", str(root), "--arch", arch, "--json"], cwd=work,
                              log=log, timeout=timeout)
    row.stages.append(Stage("build", code, round(seconds, 1), str(log)))
    if code != 0:
        row.error = _paragraph(out, log)
        return row
    try:
        built = json.loads(out)
    except ValueError:
        row.error = f"`build --json` exited 0 without one JSON document on stdout ({log})"
        return row
    row.reached = "build"
    location = (built.get("install") or {}).get("location")
    log = logs / f"{tree.name}.verify.txt"
    # A package folder is verified as installed; modules installed at the top of
    # site-packages (no package) by the name the tree imports, not the whole folder.
    is_package = bool(location) and (Path(str(location)) / "__init__.py").is_file()
    target = [str(location)] if is_package else ["--package", tree.module]
    code, seconds, out = _run([*fb, "verify", *target, "--arch", arch, "--json"], cwd=work,
                              log=log, timeout=timeout)
    row.stages.append(Stage("verify", code, round(seconds, 1), str(log)))
    if code != 0:
        row.error = _paragraph(out, log)
        return row
    row.reached = "verify"
    neutral = work / "neutral"
    neutral.mkdir(exist_ok=True)
    log = logs / f"{tree.name}.import.txt"
    # A bare extension module at the top level links torch's libraries (libc10.so) without
    # loading them: its callers import torch first, and so does this stage. The package the
    # build installed is imported alone, since its __init__ is what loads torch for its users;
    # a top-level module beside it (Deformable-DETR's MultiScaleDeformableAttention beside
    # its `functions` package) is not that package.
    own = is_package and Path(str(location)).name == tree.module.split(".")[0]
    statement = f"import {tree.module}" if own else f"import torch; import {tree.module}"
    code, seconds, out = _run([sys.executable, "-c", statement], cwd=neutral, log=log,
                              timeout=600)
    row.stages.append(Stage("import", code, round(seconds, 1), str(log)))
    if code != 0:
        row.error = _paragraph(out, log)
        return row
    row.reached = "import"
    if tests and tree.tests:
        log = logs / f"{tree.name}.tests.txt"
        if tree.tests_from:
            archive = tests_archive(tree, archives)
            try:
                unpack_tests(archive, root)
            except (OSError, tarfile.TarError) as exc:
                log.write_text(f"{type(exc).__name__}: {exc}\n", encoding="utf-8")
                row.stages.append(Stage("tests", 1, 0.0, str(log)))
                row.error = (f"the tests archive {archive} could not be unpacked ({exc}). "
                             f"Fix: `python bench/tree_tests.py --mirrors DIR --only "
                             f"{tree.name}` (tests_from = {tree.tests_from}).")
                return row
        code, seconds, out = _run(["bash", "-c", tree.tests], cwd=root, log=log,
                                  timeout=timeout)
        row.stages.append(Stage("tests", code, round(seconds, 1), str(log)))
        if code != 0:
            row.error = _paragraph(out, log)
            return row
        row.reached = "tests"
    return row


def markdown(rows: list[Row], *, arch: str) -> str:
    out = [f"| tree | shape | reached ({arch}) | stages (exit, s) | TODOs | torch "
           "| first error |",
           "|---|---|---|---|---|---|---|"]
    for row in rows:
        stages = ", ".join(f"{s.name} {s.code} {s.seconds:.0f}" for s in row.stages)
        error = row.error.replace("|", "\\|").replace("\n", " ")
        if len(error) > 300:
            error = error[:297] + "..."
        todos = "" if row.todos is None else str(row.todos)
        out.append(f"| {row.tree} | {row.shape} | {row.reached} | {stages} | {todos} "
                   f"| {row.torch} | {error} |")
    done = sum(1 for r in rows if r.reached in ("import", "tests"))
    out.append("")
    out.append(f"{done} of {len(rows)} trees reached an imported install.")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", type=Path, default=Path(__file__).with_name("trees.toml"))
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--only", default="", help="comma-separated tree names")
    ap.add_argument("--until", choices=("draft", "build"), default="build",
                    help="draft: fetch and draft only (no compile); build: every stage")
    ap.add_argument("--tests", action="store_true", help="run each tree's own tests")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per stage")
    ap.add_argument("--tests-archives", type=Path, default=ARCHIVES,
                    help="where bench/tree_tests.py wrote the archives `tests_from` names")
    args = ap.parse_args()
    trees = load_list(args.list)
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {t.name for t in trees}
        if unknown:
            raise SystemExit(f"not in {args.list}: {', '.join(sorted(unknown))}")
        by_name = {t.name: t for t in trees}
        trees = [by_name[name] for name in args.only.split(",")]  # in the order given
    missing = (missing_archives(trees, args.tests_archives)
               if args.tests and args.until == "build" else [])
    if missing:
        # Refused before any build: the tests stage comes after an hour of builds.
        raise SystemExit("--tests: no tests archive " + ", ".join(str(m) for m in missing)
                         + "; make them with `python bench/tree_tests.py --mirrors DIR` "
                         "(see its --help)")
    work = args.work.resolve()
    out = (args.out or work / "results").resolve()
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    rows = []
    for tree in trees:
        row = run_tree(tree, base=args.list.resolve().parent, work=work, logs=logs,
                       arch=args.arch, until=args.until, tests=args.tests,
                       timeout=args.timeout, archives=args.tests_archives.resolve())
        rows.append(row)
        print(f"{row.tree:<24} {row.reached:<7} "
              + " ".join(f"{s.name}={s.code}/{s.seconds:.0f}s" for s in row.stages), flush=True)
        if row.error:
            print(f"    {row.error[:400]}", flush=True)
        (out / "trees.json").write_text(json.dumps([asdict(r) for r in rows], indent=2),
                                        encoding="utf-8")
    (out / "trees.md").write_text(markdown(rows, arch=args.arch), encoding="utf-8")
    print(f"results: {out / 'trees.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
