"""The csrc recipe end to end: patch a copy of csrc for Windows + sm_120 with the real CLI, then
compile the patched tree with nvcc + gcc (CMake + Ninja) for sm_120 and for sm_90a — the
Windows-only guards must not change the Linux build — and revert it byte for byte."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from flashbuild.patching.engine import applied_state
from flashbuild.proc import ProcessRunner

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"

pytestmark = pytest.mark.integration


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def _flashbuild(*args: str) -> dict[str, object]:
    done = ProcessRunner().run([sys.executable, "-m", "flashbuild", *args, "--json"],
                               timeout=120)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.fixture
def csrc_copy(tmp_path: Path) -> Path:
    if not (CSRC / "CMakeLists.txt").exists():
        pytest.skip("csrc/ is not in this checkout")
    tree = tmp_path / "csrc"
    shutil.copytree(CSRC, tree, ignore=shutil.ignore_patterns("build*", "__pycache__",
                                                              "*.so", ".flashbuild"))
    return tree


@pytest.mark.heavy
def test_patch_windows_sm120_then_compile_and_revert(csrc_copy: Path, tmp_path: Path,
                                                     cuda_toolkit_root: Path) -> None:
    before = _snapshot(csrc_copy)
    report = _flashbuild("patch", "--source", str(csrc_copy), "--platform", "windows",
                         "--arch", "sm120")
    steps = {s["id"]: s for s in report["steps"]}  # type: ignore[union-attr]
    assert all(s["matched"] for s in steps.values()), steps
    assert report["build_excludes"] == ["sm90/bulk_copy_sm90.cu"]
    state = applied_state(csrc_copy)
    assert state is not None
    assert {p[0] for p in state.patches} == {
        "msvc-instantiations", "portable-dynamic-loading", "windows-no-sm90",
        "windows-plugin-name", "sm120-is-sm100", "sm120-traits", "sm120-allow-list"}
    # Re-applying rewrites nothing.
    again = _flashbuild("patch", "--source", str(csrc_copy), "--platform", "windows",
                        "--arch", "sm120")
    assert again["files_written"] == []

    build = tmp_path / "build"
    cmake = shutil.which("cmake", path=str(Path(sys.executable).parent)) or "cmake"
    runner = ProcessRunner()
    runner.run([cmake, "-S", str(csrc_copy), "-B", str(build), "-G", "Ninja",
                f"-DCMAKE_CUDA_COMPILER={cuda_toolkit_root / 'bin' / 'nvcc'}",
                f"-DCUDAToolkit_ROOT={cuda_toolkit_root}",
                "-DCMAKE_CUDA_ARCHITECTURES=90a-real;120-real",
                f"-DFLASHKERN_SOURCES_EXCLUDE={';'.join(state.build_excludes)}",
                f"-DFLASHKERN_OUTPUT_DIR={build / 'out'}",
                f"-DPython_EXECUTABLE={sys.executable}"], timeout=600)
    runner.run([cmake, "--build", str(build), "-j", "2"], timeout=1800)
    built = list((build / "out").glob("_C*.so"))
    assert built, "the module was not built"

    reverted = _flashbuild("patch", "--source", str(csrc_copy), "--revert")
    assert reverted["had_state"] is True
    assert _snapshot(csrc_copy) == before
