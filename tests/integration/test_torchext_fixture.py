"""The torch extension the project's Windows CI job builds (tests/fixtures/torchext) compiles
here too, through `flashbuild build`'s setuptools backend: both translation units include
torch's headers, and the nvcc flags carry only the requested arch (the setup.py's own sm_80
gencode was replaced). With the CPU torch of this machine the .cu cannot compile (the CPU build
lacks a generated c10/cuda header), which is why the Windows job installs a CUDA torch
(`flashbuild build` refuses a CPU torch up front; skipped here as in
test_build_setuptools.py); with a CUDA torch the module links and its wheel is written."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from flashbuild.building.backends import setuptools as st
from flashbuild.errors import BuildError
from flashbuild.verifying.fatbin import list_images
from tests.conftest import FIXTURES

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.heavy,
              pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not installed")]


def test_the_ci_torch_extension_compiles_for_the_requested_arch(
        tmp_path: Path, cuda_toolkit_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flashbuild.pipeline.command import run_build

    monkeypatch.setattr(st, "check_torch_cuda", lambda torch, request: None)
    tree = tmp_path / "torchext"
    shutil.copytree(FIXTURES / "torchext", tree)
    build_dir = tmp_path / "b"
    try:
        run_build(recipe=str(tree / "torchext.toml"), source=None, arch="sm120",
                  cuda=cuda_toolkit_root, platform=None, jobs_text="2", launcher_text="none",
                  install_text="wheel", build_dir=build_dir, as_json=True)
        linked = True
    except BuildError as exc:
        # The CPU build of torch ships c10/cuda's headers without the generated
        # c10/cuda/impl/cuda_cmake_macros.h, so a .cu using CUDAGuard stops there; had it
        # compiled, the link would stop at c10_cuda / torch_cuda. Either is the CPU torch.
        text = str(exc) + exc.evidence
        assert any(s in text for s in ("cuda_cmake_macros.h", "c10_cuda", "torch_cuda")), exc
        linked = False
    build = build_dir / "src" / "build"
    ninja = next(build.rglob("build.ninja")).read_text(encoding="utf-8")
    assert "sm_120" in ninja and "sm_80" not in ninja, "the setup.py's gencode list stayed"
    objects = {p.name: p for p in build.rglob("*.o")}
    assert "bindings.o" in objects, sorted(objects)  # torch/extension.h compiles here
    if linked:  # a CUDA torch: the .cu compiled for sm_120 alone, and the wheel was written
        assert [i.name for i in list_images(objects["scale.o"]).sass] == ["sm_120"]
        assert list((build_dir / "dist").glob("torchext-*.whl"))
