"""The planted 160 KB request, caught statically: csrc built for sm_120 with the allow-list
lifted but WITHOUT the SM120 traits compiles, and `flashbuild verify --arch sm120` fails it
from the binary alone (the `fk_dynamic_smem_softmax_tiled` constant in the sm_120 cubin is
163840 > 101376); the full csrc recipe, which inserts 96 KB traits, passes. No GPU needed.

Two real builds of a copy of csrc (`120-real`, -j2), installed in place into the copy. Both
use one build folder: the recipes differ only in the traits header, so the second build
recompiles the files that include it (whichever test runs first compiles everything).

The build with the csrc recipe is the quick start's own (`flashbuild build --arch sm120`) and
the default run's one compile of the whole of csrc. The build without the traits is `heavy`:
tests/unit/test_verify_dynamic_smem.py proves that check on a real nvcc object
(tests/fixtures/verify/dynsmem.o) in the default run."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TRAITS_STEP = re.compile(r'\[\[patch\]\]\nid = "sm120-traits".*?(?=\[\[patch\]\])', re.DOTALL)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tmp/{csrc,patches,recipes}: the recipe's relative paths (`../csrc`, `../patches/…`)
    resolve inside tmp, so the copy is built and installed into, never the checkout."""
    if not (ROOT / "csrc" / "CMakeLists.txt").exists():
        pytest.skip("csrc/ is not in this checkout")
    root = tmp_path_factory.mktemp("dynsmem")
    shutil.copytree(ROOT / "csrc", root / "csrc", ignore=shutil.ignore_patterns(
        "build*", "__pycache__", "*.so", ".flashbuild", "flashbuild-manifest.json"))
    shutil.copytree(ROOT / "patches", root / "patches")
    (root / "recipes").mkdir()
    text = (ROOT / "recipes" / "csrc.toml").read_text(encoding="utf-8")
    (root / "recipes" / "csrc.toml").write_text(text, encoding="utf-8")
    variant, count = TRAITS_STEP.subn("", text)
    assert count == 1, "recipes/csrc.toml no longer has the sm120-traits step"
    variant = variant.replace('name = "csrc"', 'name = "csrc-notraits"', 1)
    (root / "recipes" / "csrc-notraits.toml").write_text(variant, encoding="utf-8")
    return root


def _flashbuild(cwd: Path, *args: str) -> tuple[int, dict[str, object]]:
    done = subprocess.run([sys.executable, "-m", "flashbuild", *args, "--json"], cwd=cwd,
                          capture_output=True, text=True, check=False, timeout=900)
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        doc = {"stdout": done.stdout}
    doc["_stderr"] = done.stderr[-3000:]
    return done.returncode, doc


def _build_and_verify(root: Path, recipe: str, cuda: Path) -> dict[str, object]:
    code, doc = _flashbuild(root, "build", "--recipe", str(root / "recipes" / recipe),
                            "--arch", "120-real", "--cuda", str(cuda), "--jobs", "2",
                            "--launcher", "none", "--install", "inplace",
                            "--build-dir", str(root / "build-120"))
    assert code == 0, doc
    pkg = root / "csrc" / "python" / "flashkern"
    manifest = json.loads((pkg / "flashbuild-manifest.json").read_text(encoding="utf-8"))
    assert manifest["dynamic_smem_symbols"] == [
        {"kernel": "softmax_tiled_kernel", "symbol": "fk_dynamic_smem_softmax_tiled"}]
    code, report = _flashbuild(root, "verify", str(pkg), "--arch", "sm120", "--no-gpu")
    report["_exit"] = code
    return report


def _resources(report: dict[str, object], status: str) -> list[dict[str, str]]:
    checks = report["checks"]
    assert isinstance(checks, list)
    return [c for c in checks if c["area"] == "resources" and c["status"] == status]


@pytest.mark.heavy
def test_sm120_without_traits_fails_verify_statically(workspace: Path,
                                                      cuda_toolkit_root: Path) -> None:
    report = _build_and_verify(workspace, "csrc-notraits.toml", cuda_toolkit_root)
    assert report["_exit"] == 8 and report["ok"] is False, report
    failures = [c for c in report["checks"] if c["status"] == "fail"]  # type: ignore[union-attr]
    assert failures == _resources(report, "fail"), failures
    (fail,) = failures
    assert "softmax_tiled" in fail["subject"] and "(sm_120)" in fail["subject"]
    assert "163840 B of dynamic shared memory" in fail["summary"]
    assert "sm_120 allows 101376 B" in fail["summary"]
    assert "fk_dynamic_smem_softmax_tiled` = 163840" in fail["evidence"]
    assert "traits" in fail["fix"]


def test_sm120_with_the_csrc_recipe_passes_verify(workspace: Path,
                                                  cuda_toolkit_root: Path) -> None:
    report = _build_and_verify(workspace, "csrc.toml", cuda_toolkit_root)
    assert report["_exit"] == 0 and report["ok"] is True, report
    (ok,) = [c for c in _resources(report, "ok") if "softmax_tiled" in c["subject"]]
    assert ok["summary"] == ("requests 98304 B of dynamic shared memory; sm_120 allows "
                             "101376 B")
    assert not [c for c in _resources(report, "warn") if "softmax_tiled" in c["subject"]]
