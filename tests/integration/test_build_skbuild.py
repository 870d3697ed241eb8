"""A scikit-build-core tree in one command, for real (issue 26): nvcc, CMake, Ninja, pip and
scikit-build-core on tests/fixtures/skbuild/skcuda (one .cu file, sm_90 only).

The zero-config `flashbuild build TREE --arch sm_90` drafts `[build] backend = "skbuild"`
(introspection configured the CMakeLists with the pyproject's `MYLIB_BACKEND=cuda`, whose
CMake default is `cpu`), builds the wheel through pip with the arch and toolkit as
scikit-build-core config settings, installs it into a fresh venv with the loader shim and the
manifest; `flashbuild verify` passes (sm_90 SASS, the import); the module imports from a
neutral folder and says it is the CUDA build (no GPU here: import only, no launch);
`pip uninstall` removes it. No torch is needed.

Introspection alone: configured as a bare CMake project the tree compiles no CUDA, configured
with the pyproject's settings (the skbuild backend) it compiles the kernel.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.test_build_toplevel import _venv

pytestmark = [
    pytest.mark.integration, pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("scikit_build_core") is None,
                       reason="scikit-build-core is not installed (the `test` extra has it)"),
]

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "skbuild" / "skcuda"


def test_a_scikit_build_core_tree_builds_installs_verifies_and_imports(
        tmp_path: Path, cuda_toolkit_root: Path) -> None:
    tree = tmp_path / "skcuda"
    shutil.copytree(FIXTURE, tree)
    python, env, site = _venv(tmp_path)
    build = subprocess.run(
        [python, "-m", "flashbuild", "build", str(tree), "--arch", "sm_90", "--cuda",
         str(cuda_toolkit_root), "--jobs", "2", "--launcher", "none", "--install", "wheel",
         "--json"], cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
        timeout=900)
    assert build.returncode == 0, build.stderr[-4000:]
    doc = json.loads(build.stdout)
    draft = (tmp_path / "build" / "flashbuild" / "skcuda.draft.toml").read_text()
    assert '[build]\nbackend = "skbuild"\n' in draft, draft
    assert "cmake.define MYLIB_BACKEND=cuda" in draft
    assert '[install]\npackage = "skcuda"\npackage_dir = "python/skcuda"' in draft
    package = site / "skcuda"
    assert doc["install"]["location"] == str(package)
    assert (package / "_skcuda.abi3.so").is_file()
    assert (package / "flashbuild-manifest.json").is_file()
    log = Path(doc["log"]).read_text(encoding="utf-8", errors="replace")
    # What flashbuild passed reached CMake, and the pyproject's own define was kept.
    assert "Building CUDA object" in log and "scale.cu" in log

    verify = subprocess.run(
        [python, "-m", "flashbuild", "verify", "--package", "skcuda", "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=600)
    report = json.loads(verify.stdout)
    assert verify.returncode == 0, report
    checks = {c["area"]: c for c in report["checks"]}
    assert checks["import"]["status"] == "ok", checks
    assert [b["sass"] for b in report["binaries"]] == [["sm_90"]]

    neutral = tmp_path / "elsewhere"
    neutral.mkdir()
    imported = subprocess.run(
        [python, "-c", "import skcuda; print(skcuda.backend(), skcuda.__file__)"],
        cwd=neutral, env=env, capture_output=True, text=True, check=False, timeout=120)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.split() == ["cuda", str(package / "__init__.py")]

    subprocess.run([python, "-m", "pip", "uninstall", "-y", "-q", "skcuda"], check=True,
                   env=env, timeout=300)
    assert not package.exists()


def test_introspection_reads_the_configuration_the_pyproject_chooses(
        tmp_path: Path, cuda_toolkit_root: Path) -> None:
    """Configured as a bare CMake project (what flashbuild did before the skbuild backend),
    the tree is its CPU library; configured as scikit-build-core configures it, the kernel."""
    from flashbuild.arch import parse_arch_spec
    from flashbuild.pipeline.introspect import introspect
    from flashbuild.recipes.load import parse_recipe

    tree = tmp_path / "skcuda"
    shutil.copytree(FIXTURE, tree)

    def languages(backend: str) -> set[str]:
        recipe = parse_recipe(f'[recipe]\nname = "t-{backend}"\n[build]\nbackend = "{backend}"\n'
                              'cmake_source = "native"\n', None)
        outcome = introspect(recipe, tree, parse_arch_spec("sm_90"), cache=False,
                             bindings=False)
        assert outcome.model is not None, outcome.fallback
        return {u.language for t in outcome.model.targets for u in t.sources}

    assert "CUDA" in languages("skbuild")
    assert "CUDA" not in languages("cmake")
