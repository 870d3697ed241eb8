"""Artifacts that are not Python modules inside a package (issue 30), for real: nvcc, pip,
torch's BuildExtension, cmake and ninja on the small trees in tests/fixtures/toplevel (one
.cu each, sm_90a only).

- `topmod` (rotary-emb's shape: `CUDAExtension("topmod", ...)`, no package): the zero-config
  `flashbuild build TREE` drafts `[install] top_level`, builds the wheel and installs
  `topmod*.so` at the top of a fresh venv's site-packages (with its manifest in the
  .dist-info); `flashbuild verify --package topmod` finds it and looks `topmod.block_size` up
  on the module; `pip uninstall` removes it all.
- `beside` (causal-conv1d's shape): recipe init, with setup.py run in record mode, drafts the
  package and the top-level module, and the export on the module.
- `ctypeslib`: a CMake SHARED library written into the package that loads it with ctypes is
  drafted, built, installed into that package and verified (no exports, said so).

CPU torch here: the setup.py trees drop torch's `*_cuda` libraries from their link (test
scaffolding, see the fixtures' README), and the build's refusal of a CPU-only torch is turned
off for the venv's run, as tests/integration/test_build_setuptools.py does in process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.markers import needs_torch

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TREES = ROOT / "tests" / "fixtures" / "toplevel"
EXT = sysconfig.get_config_var("EXT_SUFFIX")
#: flashbuild's CLI with the CPU-only torch refusal off (a CUDA torch passes it anyway).
CPU_TORCH_CLI = (
    "import sys\n"
    "from flashbuild.building.backends import setuptools as st\n"
    "st.check_torch_cuda = lambda torch, request: None\n"
    "from flashbuild.cli import app\n"
    "sys.argv[0] = 'flashbuild'\n"
    "app()\n")


def _venv(root: Path) -> tuple[str, dict[str, str], Path]:
    """A fresh venv whose interpreter runs flashbuild (from this checkout) with this
    environment's packages (torch, pip's build deps) after its own site-packages."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)],
                   check=True, timeout=300)
    python = str(venv / "bin" / "python")
    site = Path(json.loads(subprocess.run(
        [python, "-c", "import json, sysconfig; print(json.dumps(sysconfig.get_paths()))"],
        capture_output=True, text=True, check=True).stdout)["platlib"])
    paths = [sysconfig.get_paths()["purelib"], str(ROOT),
             *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}
    return python, env, site


@needs_torch
def test_a_top_level_module_is_built_installed_and_verified_by_its_name(
        tmp_path: Path, cuda_toolkit_root: Path) -> None:
    tree = tmp_path / "topmod"
    shutil.copytree(TREES / "topmod", tree)
    python, env, site = _venv(tmp_path)
    build = subprocess.run(
        [python, "-c", CPU_TORCH_CLI, "build", str(tree), "--arch", "sm_90a", "--cuda",
         str(cuda_toolkit_root), "--jobs", "2", "--launcher", "none", "--install", "wheel",
         "--json"], cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
        timeout=900)
    assert build.returncode == 0, build.stderr[-4000:]
    doc = json.loads(build.stdout)
    draft = (tmp_path / "build" / "flashbuild" / "topmod.draft.toml").read_text()
    assert '[install]\ntop_level = ["topmod"]' in draft
    module = site / f"topmod{EXT}"
    # The repacked wheel's version carries the archs, CUDA and torch it was built with
    # (`0.1+sm90a.cu130torch2.13`), so the .dist-info is found by the distribution's name.
    infos = sorted(site.glob("topmod-0.1*.dist-info"))
    assert len(infos) == 1, infos
    assert infos[0].name.startswith("topmod-0.1+"), infos[0].name
    manifest = infos[0] / "flashbuild-manifest.json"
    assert module.is_file() and manifest.is_file()
    assert doc["install"]["location"] == str(site)
    assert not (site / "_flashbuild_shim.py").exists()
    assert json.loads(manifest.read_text())["top_level"] == ["topmod"]

    # verify finds the manifest in the .dist-info and the export on the module.
    verify = subprocess.run(
        [python, "-m", "flashbuild", "verify", "--package", "topmod", "--json"],
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=600,
        env={**env, "LD_LIBRARY_PATH": os.pathsep.join(
            # cudart for the import: torch's CUDA wheels bring it; a CPU torch does not.
            p for p in (str(cuda_toolkit_root / "lib64"), os.environ.get("LD_LIBRARY_PATH"))
            if p)})
    report = json.loads(verify.stdout)
    assert verify.returncode == 0, report
    assert report["manifest"] == str(manifest) and report["targets"] == "90a-real"
    checks = {c["area"]: c for c in report["checks"]}
    assert checks["exports"]["status"] == "ok", checks
    assert checks["import"]["status"] == "ok", checks
    assert [b["sass"] for b in report["binaries"]] == [["sm_90a"]]

    subprocess.run([python, "-m", "pip", "uninstall", "-y", "-q", "topmod"], check=True,
                   env=env, timeout=300)
    assert not module.exists() and not manifest.parent.exists()


def _drafted(tmp_path: Path, name: str) -> str:
    """`recipe init` (record mode, linux, sm_90a) of a copy of fixture tree `name`: the draft."""
    tree = tmp_path / name
    shutil.copytree(TREES / name, tree)
    out = tmp_path / f"{name}.toml"
    done = subprocess.run(
        [sys.executable, "-m", "flashbuild", "recipe", "init", "--source", str(tree),
         "--platform", "linux", "--arch", "sm_90a", "-o", str(out)],
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out.read_text()


@needs_torch
def test_a_top_level_module_beside_its_package_is_drafted_with_both(tmp_path: Path) -> None:
    text = _drafted(tmp_path, "beside")
    assert "setup.py record mode: builds beside_cuda" in text, text
    assert '[install]\npackage = "beside"\npackage_dir = "beside"\n' \
        'top_level = ["beside_cuda"]\n' in text
    # beside/__init__.py binds `_impl`, not the module's names: the export is the module's.
    assert 'exports = [\n  "beside_cuda.block_size",\n]' in text


@needs_torch
def test_extensions_in_two_subpackages_install_into_the_package_that_holds_both(
        tmp_path: Path) -> None:
    # Drafted as the first module's subpackage (`subpk.a`), the build installed its manifest
    # there, naming `../b/_b…so`, and verify refused it ("leaves the package folder").
    text = _drafted(tmp_path, "subpkgs")
    assert '[install]\npackage = "subpk"\npackage_dir = "subpk"\n' in text, text
    assert '"a._a.block_size",' in text and '"b._b.block_b",' in text, text


def test_a_ctypes_library_is_drafted_built_installed_and_verified(
        tmp_path: Path, cuda_toolkit_root: Path) -> None:
    tree = tmp_path / "ctypeslib"
    shutil.copytree(TREES / "ctypeslib", tree)
    build = subprocess.run(
        [sys.executable, "-m", "flashbuild", "build", str(tree), "--arch", "sm_90a", "--cuda",
         str(cuda_toolkit_root), "--jobs", "2", "--launcher", "none", "--install", "inplace",
         "--json"], cwd=tmp_path, capture_output=True, text=True, check=False, timeout=900)
    assert build.returncode == 0, build.stderr[-4000:]
    doc = json.loads(build.stdout)
    package = tree / "ctlib"
    assert doc["install"]["location"] == str(package)
    assert [a["kind"] for a in doc["artifacts"]] == ["plugin"]
    assert (package / "libctlib_cuda.so").is_file()
    verify = subprocess.run(
        [sys.executable, "-m", "flashbuild", "verify", str(package), "--json"],
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=600)
    report = json.loads(verify.stdout)
    assert verify.returncode == 0, report
    checks = {c["area"]: c for c in report["checks"]}
    assert checks["import"]["status"] == "ok", checks
    assert checks["exports"]["status"] == "skip"
    assert "libctlib_cuda.so is a shared library the package loads itself (ctypes)" in \
        checks["exports"]["summary"]
    assert [b["sass"] for b in report["binaries"]] == [["sm_90a"]]
    # The library came from the build, not from the tree: the tree held none.
    assert not (TREES / "ctypeslib" / "ctlib" / "libctlib_cuda.so").exists()
