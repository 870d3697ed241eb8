"""`flashbuild ci init` on real trees of ../shared/corpus (causal-conv1d with its bundled
recipe, FlashMLA and xformers-full with the small recipes in tests/fixtures/ci): the workflow
it writes lints clean with actionlint, and its matrix, cache and artifact names are the ones
asked for. The template itself is a workflow actionlint accepts as it is. Skips cleanly when
the corpus is not there."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashbuild.ci import workflow
from flashbuild.cli import app
from tests.conftest import FIXTURES, ROOT
from tests.integration.test_workflows import _actionlint
from tests.unit.test_ci_init import env_value, matrix

CORPUS = ROOT.parent / "shared" / "corpus"
pytestmark = pytest.mark.integration

# tree → (recipe: bundled name or fixture file copied into the tree, arch, import package)
CASES = {
    "causal-conv1d": ("causal-conv1d", "90a;120", "causal_conv1d"),
    "FlashMLA": ("flashmla.toml", "90a", "flash_mla"),
    "xformers-full": ("xformers.toml", "80;90a;120", "xformers"),
}


def _lint(path: Path) -> None:
    done = subprocess.run([_actionlint(), "-no-color", str(path)], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_template_lints_clean_as_it_is() -> None:
    _lint(workflow.TEMPLATE)


@pytest.mark.parametrize("tree", sorted(CASES))
def test_ci_init_on_a_corpus_tree(tree: str, tmp_path: Path) -> None:
    tarball = CORPUS / f"{tree}.tar.gz"
    if not tarball.is_file():
        pytest.skip(f"no corpus tree at {tarball}")
    with tarfile.open(tarball) as tar:
        tar.extractall(tmp_path, filter="data")
    root = tmp_path / tree
    recipe, arch, package = CASES[tree]
    if recipe.endswith(".toml"):
        shutil.copy(FIXTURES / "ci" / recipe, root / ".flashbuild-ci.toml")
        recipe = str(root / ".flashbuild-ci.toml")
    result = CliRunner().invoke(app, [
        "ci", "init", "--recipe", recipe, "--source", str(root), "--arch", arch,
        "--platform", "linux,windows", "--cuda", "12.9,13.0", "--python", "3.11,3.12,3.13",
        "--flashbuild-spec", "flashbuild @ git+https://example.invalid/fb@" + "0" * 40])
    assert result.exit_code == 0, result.output
    out = root / ".github" / "workflows" / "flashbuild.yml"
    _lint(out)

    text = out.read_text(encoding="utf-8")
    entries = matrix(text)
    # xformers tags its wheel py39-none (torch's stable ABI, no Python C API): one wheel
    # serves every Python, built with the oldest.
    pythons = ("3.11",) if tree == "xformers-full" else ("3.11", "3.12", "3.13")
    assert sorted((e["platform"], e["cuda"], e["python"]) for e in entries) == sorted(
        (p, c, y) for p in ("linux", "windows") for c in ("12.9", "13.0") for y in pythons)
    assert env_value(text, "FLASHBUILD_PACKAGE") == package
    assert env_value(text, "FLASHBUILD_RECIPE") == (
        ".flashbuild-ci.toml" if recipe.endswith(".toml") else recipe)
    assert {e["arch-label"] for e in entries} == {"-".join(f"sm{a}" for a in arch.split(";"))}
    # Cache: pip keyed on this file, sccache on the GitHub Actions cache backend, in front of
    # every compile the build runs.
    assert "hashFiles('.github/workflows/flashbuild.yml')" in text
    assert 'SCCACHE_GHA_ENABLED: "true"' in text
    assert "mozilla-actions/sccache-action@" in text and "--launcher sccache" in text
    # Artifacts: one per coordinate, collected by the release job.
    assert ("name: wheel-${{ matrix.platform }}-cuda${{ matrix.cuda }}-py${{ matrix.python }}"
            "-${{ env.ARCH_LABEL }}") in text
    assert "pattern: wheel-*" in text
    # The release job collects what was built, and publishes only a complete set on a tag.
    assert "if: ${{ !cancelled() }}" in text
    assert "startsWith(github.ref, 'refs/tags/') && needs.wheel.result == 'success'" in text
    # Every job runs doctor, build and verify, in that order.
    steps = [text.index(s) for s in ("flashbuild doctor --arch", "flashbuild -v build --recipe",
                                      "flashbuild verify --package")]
    assert steps == sorted(steps)
