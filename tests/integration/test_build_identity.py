"""The staged mirror keeps the tree's identity (issue 19, item 2), with real git and real pip.

Each fixture tree versions itself the way upstream trees do: `git rev-parse --short HEAD`
(FlashMLA), `git describe --tags --dirty --always --long` with GIT_DIR dropped (versioneer),
setuptools_scm, and no VCS at all with a time-based fallback (FlashMLA from a tarball). The
build runs pip's PEP 517 path in the mirror, which runs setup.py twice (metadata, then wheel)
and rejects a wheel whose version differs between them ("Built wheel ... is invalid"). The
wheel's version must be the one the tree gives.

The builds must link for pip to get that far: the fixtures drop torch's `*_cuda` libraries from
the link (a CPU-only torch has none; that line is test scaffolding, not what the trees do), so
the wheel is complete on this CPU machine. `--install none`: nothing goes into the venv.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flashbuild.building import staging, vcs
from flashbuild.building.backends import setuptools as st
from flashbuild.proc import ProcessRunner

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not installed"),
              pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")]

SETUP = """import os, subprocess, time
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

{version}

ext = CUDAExtension(name="idtree._C", sources=["csrc/k.cu"])
# Test scaffolding: a CPU-only torch has no *_cuda libraries; without them the link succeeds.
ext.libraries = [lib for lib in ext.libraries if not lib.endswith("_cuda")]
setup(name="idtree", {version_kw}packages=["idtree"], ext_modules=[ext],
      cmdclass={{"build_ext": BuildExtension}})
"""
# FlashMLA's scheme: the short commit, else the time (FlashMLA takes it to the second; here to
# the nanosecond, so pip's two steps always differ without flashbuild's hand-over).
REV_PARSE = """def version():
    try:
        rev = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"],
                                      stderr=subprocess.DEVNULL).decode().strip()
    except Exception:
        rev = str(time.time_ns())
    return "1.0.0+" + rev
"""
# versioneer's git call (git_pieces_from_vcs), with the environment it uses: GIT_DIR dropped.
DESCRIBE = """def version():
    env = os.environ.copy()
    env.pop("GIT_DIR", None)
    out = subprocess.check_output(["git", "describe", "--tags", "--dirty", "--always",
                                   "--long", "--match", "v*"], env=env).decode().strip()
    dirty = out.endswith("-dirty")
    tag, distance, sha = out.removesuffix("-dirty").rsplit("-", 2)
    return tag[1:] + "+" + distance + "." + sha + (".dirty" if dirty else "")
"""
# torch-batch-svd's scheme: no fallback, so outside a checkout the setup.py raises.
STRICT = """def version():
    return "1.0.0+" + subprocess.check_output(["git", "rev-parse", "--short", "HEAD"]
                                              ).decode().strip()
"""
KERNEL = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n'
RECIPE = """[recipe]
name = "idtree"
[source]
path = "."
[build]
backend = "setuptools"
[install]
package = "idtree"
package_dir = "idtree"
"""


def _git(tree: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    return subprocess.run(["git", *args], cwd=tree, env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def _tree(root: Path, scheme: str, *, git: bool = True) -> Path:
    tree = root / "idtree"
    (tree / "csrc").mkdir(parents=True)
    (tree / "idtree").mkdir()
    if scheme == "scm":
        code, kw = "", "use_scm_version=True, "
    else:
        code = {"rev-parse": REV_PARSE, "strict": STRICT}.get(scheme, DESCRIBE)
        kw = "version=version(), "
    (tree / "setup.py").write_text(SETUP.format(version=code, version_kw=kw))
    (tree / "csrc" / "k.cu").write_text(KERNEL)
    (tree / "idtree" / "__init__.py").write_text("")
    (tree / "tree.toml").write_text(RECIPE)
    if git:
        _git(tree, "init", "-q", "-b", "main")
        _git(tree, "add", "-A")
        _git(tree, "commit", "-q", "-m", "one")
        _git(tree, "tag", "-a", "v1.2.3", "-m", "v1.2.3")
        (tree / "README").write_text("two\n")
        _git(tree, "add", "README")
        _git(tree, "commit", "-q", "-m", "two")
    return tree


def _build(tree: Path, cuda: Path, build_dir: Path) -> str:
    """Build a wheel of `tree` through flashbuild; its version."""
    from flashbuild.pipeline.command import run_build

    run_build(recipe=str(tree / "tree.toml"), source=None, arch="sm_90a", cuda=cuda,
              platform=None, jobs_text="2", launcher_text="none", install_text="none",
              build_dir=build_dir, as_json=True)
    wheels = list((build_dir / "dist-setuptools").glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0].name.split("-")[1]


@pytest.fixture(autouse=True)
def _linkable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(st, "check_torch_cuda", lambda torch, request: None)


def _snapshot(tree: Path) -> dict[str, bytes]:
    return {str(p.relative_to(tree)): p.read_bytes() for p in sorted(tree.rglob("*"))
            if p.is_file()}


def test_git_rev_parse_gives_the_trees_commit(tmp_path: Path, cuda_toolkit_root: Path) -> None:
    tree = _tree(tmp_path, "rev-parse")
    before = _snapshot(tree)
    version = _build(tree, cuda_toolkit_root, tmp_path / "b")
    assert version == "1.0.0+" + _git(tree, "rev-parse", "--short", "HEAD")
    after = _snapshot(tree)
    assert after == before, "the build wrote into the tree or its .git"


def test_git_describe_as_versioneer_runs_it(tmp_path: Path, cuda_toolkit_root: Path) -> None:
    tree = _tree(tmp_path, "describe")
    version = _build(tree, cuda_toolkit_root, tmp_path / "b")
    sha = _git(tree, "rev-parse", "--short", "HEAD")
    assert version == f"1.2.3+1.g{sha}"  # clean in the tree, so not dirty in the mirror


def test_no_vcs_time_fallback_is_one_version_for_pips_two_steps(
        tmp_path: Path, cuda_toolkit_root: Path) -> None:
    tree = _tree(tmp_path, "rev-parse", git=False)
    # The tree must not sit inside another repository (tmp_path does not).
    version = _build(tree, cuda_toolkit_root, tmp_path / "b")
    assert version.startswith("1.0.0+") and version[len("1.0.0+"):].isdigit()
    assert not (tmp_path / "b" / "src" / ".git").exists()


@pytest.fixture(scope="module")
def scm_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """setuptools_scm installed into a folder of its own (not into the environment the other
    tests share), through pip from the configured index; skips offline."""
    target = tmp_path_factory.mktemp("scm")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                           "--target", str(target), "setuptools-scm", "vcs-versioning"],
                          capture_output=True, text=True, check=False, timeout=300)
    if done.returncode != 0:
        pytest.skip(f"setuptools-scm cannot be installed here: {done.stderr[-300:]}")
    return target


def test_setuptools_scm_gives_the_trees_version(tmp_path: Path, cuda_toolkit_root: Path,
                                               scm_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    tree = _tree(tmp_path, "scm")
    pythonpath = os.pathsep.join(p for p in (str(scm_path), os.environ.get("PYTHONPATH", ""))
                                 if p)
    monkeypatch.setenv("PYTHONPATH", pythonpath)
    expected = subprocess.run(
        [sys.executable, "-c", "from setuptools_scm import get_version; print(get_version())"],
        cwd=tree, capture_output=True, text=True, check=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("GIT_")}).stdout.strip()
    assert expected.startswith("1.2.4.dev1+g"), expected
    version = _build(tree, cuda_toolkit_root, tmp_path / "b")
    assert version == expected


def test_patched_files_do_not_make_the_mirror_dirty_but_the_users_edits_do(
        tmp_path: Path) -> None:
    # No build: the mirror and its git identity alone, with git describe --dirty in it.
    tree = _tree(tmp_path, "describe")
    folder = tmp_path / "b"

    def patch(mirror: Path) -> list[str]:
        target = mirror / "csrc" / "k.cu"
        text = target.read_text()
        target.unlink()  # a new inode, as the patch engine writes
        target.write_text(text + "// patched\n")
        return ["csrc/k.cu"]

    def describe() -> str:
        staged = staging.stage(tree, folder, patch)
        vcs.link_git(tree, staged.mirror, folder, staged.patched, runner=ProcessRunner(),
                     env=os.environ)
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        return subprocess.run(["git", "describe", "--tags", "--dirty", "--always", "--long"],
                              cwd=staged.mirror, env=env, capture_output=True, text=True,
                              check=True).stdout.strip()

    # Files written in the second the index was (a quick fixture, a loaded machine) are
    # "racily clean" to git: any git command in the tree may then rewrite its index. Dated
    # back and refreshed once, the index is stable, and only the mirror could write it.
    past = time.time() - 10
    for path in tree.rglob("*"):
        if ".git" not in path.relative_to(tree).parts:
            os.utime(path, (past, past))
    _git(tree, "update-index", "-q", "--refresh")
    expected = _git(tree, "describe", "--tags", "--dirty", "--always", "--long")
    index = (tree / ".git" / "index").read_bytes()
    assert describe() == expected
    assert not describe().endswith("-dirty")
    assert (tree / ".git" / "index").read_bytes() == index, "the tree's index was written"
    (tree / "setup.py").write_text((tree / "setup.py").read_text() + "# edited\n")
    assert describe().endswith("-dirty")  # the user's edit is the tree's state: dirty there too


def test_a_checked_out_submodule_keeps_git_working_in_the_mirror(tmp_path: Path) -> None:
    # A submodule's `.git` is a file with a relative gitdir that does not resolve in the
    # mirror: mirrored, it made every git command there fail ("not a git repository").
    lib = tmp_path / "lib"
    lib.mkdir()
    _git(lib, "init", "-q")
    (lib / "a.h").write_text("int a;\n")
    _git(lib, "add", "a.h")
    _git(lib, "commit", "-q", "-m", "lib")
    tree = _tree(tmp_path, "describe")
    _git(tree, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib),
         "third_party/lib")
    _git(tree, "commit", "-q", "-m", "sub")
    assert (tree / "third_party" / "lib" / ".git").is_file()
    folder = tmp_path / "b"
    staged = staging.stage(tree, folder, lambda _mirror: [])
    vcs.link_git(tree, staged.mirror, folder, [], runner=ProcessRunner(), env=os.environ)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    argv = ["git", "describe", "--tags", "--dirty", "--always", "--long"]
    mirror = subprocess.run(argv, cwd=staged.mirror, env=env, capture_output=True, text=True,
                            check=False)
    assert mirror.returncode == 0, mirror.stderr
    assert mirror.stdout.strip() == _git(tree, *argv[1:])


def test_tracked_files_the_mirror_leaves_out_do_not_make_it_dirty(tmp_path: Path) -> None:
    # The mirror skips a top-level build/ (setuptools' output folder); a tree that tracks a
    # file there is still clean.
    tree = _tree(tmp_path, "describe")
    (tree / "build").mkdir()
    (tree / "build" / "helper.cmake").write_text("# tracked\n")
    _git(tree, "add", "build/helper.cmake")
    _git(tree, "commit", "-q", "-m", "tracked build folder")
    folder = tmp_path / "b"
    staged = staging.stage(tree, folder, lambda _mirror: [])
    assert not (staged.mirror / "build" / "helper.cmake").exists()
    vcs.link_git(tree, staged.mirror, folder, [], runner=ProcessRunner(), env=os.environ)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    argv = ["git", "describe", "--tags", "--dirty", "--always", "--long"]
    mirror = subprocess.run(argv, cwd=staged.mirror, env=env, capture_output=True, text=True,
                            check=True).stdout.strip()
    assert mirror == _git(tree, *argv[1:]) and not mirror.endswith("-dirty")


def test_record_mode_answers_git_as_the_checkout_does(tmp_path: Path) -> None:
    """Record mode runs setup.py on a copy of the tree, which had no `.git`: a setup.py that
    asks git for its version raised there (CalledProcessError, status 128), and the draft
    said so in a TODO although the build itself, which links git, would pass. The copy gets
    the tree's git identity too."""
    from flashbuild.arch import parse_arch_spec
    from flashbuild.pipeline.introspect import introspect
    from flashbuild.recipes.load import parse_recipe

    work = tmp_path / "work"
    tree = _tree(work, "strict")
    recipe = parse_recipe('[recipe]\nname = "t"\n[source]\npath = "idtree"\n'
                          '[build]\nbackend = "setuptools"\n', None)
    before = _snapshot(tree)
    outcome = introspect(recipe, tree, parse_arch_spec("sm_90a"), timeout=300)
    assert outcome.model is not None, outcome.reason
    assert outcome.model.exception is None, outcome.model.exception
    assert [t.name for t in outcome.model.targets] == ["idtree._C"]
    assert _snapshot(tree) == before
    # And outside a checkout the same setup.py raises, as it would for pip.
    shutil.rmtree(tree / ".git")
    again = introspect(recipe, tree, parse_arch_spec("sm_90a"), timeout=300)
    assert again.model is not None and again.model.exception is not None
    assert "rev-parse" in str(again.model.exception)
