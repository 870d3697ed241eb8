"""Build false passes: inputs that used to build the wrong thing with exit 0. Flags that nvcc
reads from its environment (NVCC_APPEND_FLAGS / NVCC_PREPEND_FLAGS / NVCC_CCBIN), from the
user's shell or the recipe's [[build.env]], and a CUDAExtension with no device code. Each case
runs the real CLI on a real CMake or setuptools tree with the PyPI nvcc. A case that exits 0
where it must not is counted as a false pass in the suite's tally. Nothing runs on a GPU."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flashbuild.verifying.fatbin import list_images
from tests.integration.conftest import cuda_toolkit_root  # noqa: F401 - a fixture
from tests.reliability.helpers import Outcome, record, snapshot

pytestmark = pytest.mark.integration

ARCHVAR = Path(__file__).resolve().parent.parent / "fixtures" / "build" / "archvar"
HAND_OVER = '\n[[build.options]]\ndefine = { GPU_ARCH = "{arch_codes}" }\n'
#: flashbuild with the CPU-only torch check skipped (this machine's torch has no CUDA).
CPU_TORCH_MAIN = ("import sys; from flashbuild.building.backends import setuptools as st; "
                  "st.check_torch_cuda = lambda torch, request: None; "
                  "from flashbuild.__main__ import main; sys.argv[0] = 'flashbuild'; main()")


def _build(entry: list[str], recipe: Path, cuda: Path, build_dir: Path,
           env: dict[str, str] | None = None) -> tuple[Outcome, dict[str, object]]:
    argv = [*entry, "build", "--recipe", str(recipe), "--arch", "sm_90a", "--cuda", str(cuda),
            "--jobs", "2", "--launcher", "none", "--install", "none", "--build-dir",
            str(build_dir), "--json"]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NVCC_")}
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=900,
                          env={**clean, "COLUMNS": "200", **(env or {})})
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        doc = {}
    return Outcome(done.returncode, done.stdout + done.stderr, 0.0), doc


def _judge(case: str, out: Outcome, *, code: int, tree: Path,
           before: dict[str, tuple[str, bytes]], say: str = "") -> None:
    changed = snapshot(tree) != before
    record(case, clear_error=out.clear_error() if code else None, data_lost=False,
           tree_changed=changed, hang=False, false_pass=code != 0 and out.code == 0)
    assert out.code == code, f"{case}: exit {out.code}, expected {code}\n{out.output}"
    assert not out.traceback and not out.internal, out.output
    if code:
        assert out.clear_error(), out.output
    if say:
        assert say in " ".join(out.output.split()), out.output
    assert not changed, f"{case}: the tree changed"


def _archvar(tmp_path: Path, extra: str = "") -> Path:
    tree = tmp_path / "archvar"
    shutil.copytree(ARCHVAR, tree)
    (tree / "archvar.toml").write_text((tree / "archvar.toml").read_text() + HAND_OVER + extra)
    return tree


def test_arch_flags_in_the_users_nvcc_append_flags_are_refused(
        tmp_path: Path, cuda_toolkit_root: Path) -> None:  # noqa: F811
    tree = _archvar(tmp_path)
    before = snapshot(tree)
    out, _ = _build([sys.executable, "-m", "flashbuild"], tree / "archvar.toml",
                    cuda_toolkit_root, tmp_path / "b",
                    env={"NVCC_APPEND_FLAGS": "-gencode=arch=compute_80,code=sm_80"})
    _judge("build false pass: sm_80 in the user's NVCC_APPEND_FLAGS", out, code=6, tree=tree,
           before=before, say="NVCC_APPEND_FLAGS=-gencode=arch=compute_80,code=sm_80 (from "
           "your environment)")
    assert not list((tmp_path / "b").rglob("kernel.cu.o")), "nothing may compile"


def test_nvcc_flags_that_match_the_arch_still_build(
        tmp_path: Path, cuda_toolkit_root: Path) -> None:  # noqa: F811
    """Not a false refusal: the arch --arch asks for, plus a flag that is not about arch."""
    tree = _archvar(tmp_path, '\n[[build.env]]\nset = { NVCC_PREPEND_FLAGS = '
                              '"-lineinfo -gencode arch=compute_90a,code=sm_90a" }\n')
    before = snapshot(tree)
    out, doc = _build([sys.executable, "-m", "flashbuild"], tree / "archvar.toml",
                      cuda_toolkit_root, tmp_path / "b")
    _judge("build: NVCC_PREPEND_FLAGS with --arch's own gencode", out, code=0, tree=tree,
           before=before)
    built = [Path(str(a["path"])) for a in doc["artifacts"]]  # type: ignore[attr-defined]
    assert {i.name for i in list_images(built[0]).sass} == {"sm_90a"}


def test_a_recipe_nvcc_ccbin_other_than_the_checked_compiler_is_refused(
        tmp_path: Path, cuda_toolkit_root: Path) -> None:  # noqa: F811
    other = tmp_path / "other-g++"
    other.write_text("#!/bin/sh\nexec g++ \"$@\"\n")
    other.chmod(0o755)
    tree = _archvar(tmp_path, f'\n[[build.env]]\nset = {{ NVCC_CCBIN = "{other}" }}\n')
    before = snapshot(tree)
    out, _ = _build([sys.executable, "-m", "flashbuild"], tree / "archvar.toml",
                    cuda_toolkit_root, tmp_path / "b")
    _judge("build false pass: a recipe's NVCC_CCBIN", out, code=6, tree=tree, before=before,
           say=f"NVCC_CCBIN={other} (from the recipe's [[build.env]])")
    assert not (tmp_path / "b" / "src").exists(), "refused before anything was staged"


def test_a_cuda_extension_without_device_code_is_refused(
        tmp_path: Path, cuda_toolkit_root: Path) -> None:  # noqa: F811
    pytest.importorskip("torch")
    tree = tmp_path / "hostonly"
    (tree / "hostonly").mkdir(parents=True)
    (tree / "hostonly" / "__init__.py").write_text("")
    (tree / "host.cpp").write_text("int host_only() { return 1; }\n")
    # The tree's kernels, which this setup.py's source list leaves out (a glob that matched
    # nothing): a tree with no .cu at all builds its host code, with a note.
    (tree / "kernels.cu").write_text("__global__ void k() {}\n")
    (tree / "setup.py").write_text(
        "from setuptools import setup\n"
        "from torch.utils.cpp_extension import BuildExtension, CUDAExtension\n"
        "setup(name='hostonly', version='0.1', packages=['hostonly'],\n"
        "      ext_modules=[CUDAExtension('hostonly._C', ['host.cpp'])],\n"
        "      cmdclass={'build_ext': BuildExtension})\n")
    (tree / "r.toml").write_text('[recipe]\nname = "hostonly"\n[source]\npath = "."\n'
                                 '[build]\nbackend = "setuptools"\n[install]\n'
                                 'package = "hostonly"\npackage_dir = "hostonly"\n')
    before = snapshot(tree)
    out, _ = _build([sys.executable, "-c", CPU_TORCH_MAIN], tree / "r.toml", cuda_toolkit_root,
                    tmp_path / "b")
    _judge("build false pass: a CUDAExtension without .cu sources", out, code=6, tree=tree,
           before=before, say="declares `hostonly._C` a CUDA extension")
