"""Arch-aware loading for real: binaries built here (the fixture objects, nvcc 13.0), installed
in place with the loader shim by the install stage, then imported in a fresh interpreter while a
stand-in NVML (tests/fixtures/nvml/fake_nvml.c, compiled here with the host C compiler and found
as libnvidia-ml.so.1 through LD_LIBRARY_PATH) reports the GPUs. The shim refuses a package with
no image the GPU can run, with the paragraph and the fix; it imports one with SASS for the GPU,
and one with PTX only with the JIT note."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flashbuild.building.artifacts import BuiltArtifact
from flashbuild.installing import install as inst
from flashbuild.installing.manifest import BinaryImages
from flashbuild.verifying.fatbin import list_images

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(sys.platform != "linux", reason="NVML stand-in is an ELF .so")]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RTX_5090 = "12.0:NVIDIA GeForce RTX 5090"
H100 = "9.0:NVIDIA H100 80GB HBM3"


def _package(root: Path, binary: str) -> Path:
    """A package `pkg` installed in place by the install stage, its one binary a fixture object
    built by nvcc, its images read from that binary as the build reads them."""
    source = FIXTURES / "verify" / binary
    found = list_images(source)
    record = BinaryImages(path="_k.so", sass=tuple(dict.fromkeys(i.name for i in found.sass)),
                          ptx=tuple(dict.fromkeys(i.name for i in found.ptx)))
    package = root / "src" / "pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""pkg."""\nVALUE = 42\n')
    built = root / "build" / "_k.so"
    built.parent.mkdir()
    shutil.copyfile(source, built)
    plan = inst.InstallPlan(
        mode="inplace", package="pkg", package_dir=package,
        artifacts=(BuiltArtifact(path=built, kind="module", name="_k"),),
        dll_dirs=(), manifest_name="flashbuild-manifest.json", manifest=b"{}\n",
        python=sys.executable, work_dir=root / "build",
        images=((record.path, record.images),),
        rebuild="flashbuild build /trees/pkg --arch {arch}")
    inst.install(plan, runner=None, env=os.environ)  # type: ignore[arg-type]  # inplace: no process
    return root / "src"


def _import(src: Path, nvml: Path | None, gpus: str | None, **env: str
            ) -> subprocess.CompletedProcess[str]:
    child = {k: v for k, v in os.environ.items()
             if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES")}
    child["PYTHONPATH"] = str(src)
    if nvml is not None:
        child["LD_LIBRARY_PATH"] = str(nvml)
    if gpus is not None:
        child["FAKE_NVML_GPUS"] = gpus
    child.update(env)
    code = ("import warnings, json\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    import pkg\n"
            "print(json.dumps([str(x.message) for x in w]))\n")
    return subprocess.run([sys.executable, "-c", code], env=child, capture_output=True,
                          text=True, check=False, timeout=60, cwd=src.parent)


def _warnings(done: subprocess.CompletedProcess[str]) -> list[str]:
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_sm90a_only_refuses_an_sm120_gpu_with_the_paragraph(fake_nvml: Path,
                                                             tmp_path: Path) -> None:
    src = _package(tmp_path, "sass_sm90a.o")
    done = _import(src, fake_nvml, RTX_5090)
    assert done.returncode == 1
    message = done.stderr.strip().splitlines()[-1]
    assert message.startswith("ImportError: pkg cannot run on this machine's GPU")
    assert "GPU 0 (NVIDIA GeForce RTX 5090, compute capability 12.0)" in message
    assert "_k.so holds sm_90a SASS and no PTX" in message
    assert "no kernel image is available" in message
    assert "`flashbuild build /trees/pkg --arch sm_120`" in message
    assert "FLASHBUILD_ARCH_CHECK=0" in message


def test_the_check_can_be_turned_off_and_needs_a_driver(fake_nvml: Path, tmp_path: Path) -> None:
    src = _package(tmp_path, "sass_sm90a.o")
    assert _warnings(_import(src, fake_nvml, RTX_5090, FLASHBUILD_ARCH_CHECK="0")) == []
    assert _warnings(_import(src, None, None)) == []  # no NVML here: nothing to check
    assert _warnings(_import(src, fake_nvml, RTX_5090, FAKE_NVML_FAIL="init")) == []
    assert _warnings(_import(src, fake_nvml, "")) == []  # a driver, no GPU


def test_the_arch_it_was_built_for_imports_quietly(fake_nvml: Path, tmp_path: Path) -> None:
    assert _warnings(_import(_package(tmp_path / "a", "sass_sm90a.o"), fake_nvml, H100)) == []
    assert _warnings(_import(_package(tmp_path / "b", "sass_ptx_sm120.o"), fake_nvml,
                             RTX_5090)) == []


def test_ptx_only_imports_with_the_jit_note(fake_nvml: Path, tmp_path: Path) -> None:
    src = _package(tmp_path, "ptx_compute90.o")
    notes = _warnings(_import(src, fake_nvml, RTX_5090))
    assert len(notes) == 1 and "compiles its PTX at the first launch" in notes[0]


def test_a_gpu_left_out_is_a_warning_and_visible_devices_narrow_the_gpus(
        fake_nvml: Path, tmp_path: Path) -> None:
    src = _package(tmp_path, "sass_sm90a.o")
    both = f"{H100},{RTX_5090}"
    notes = _warnings(_import(src, fake_nvml, both))
    assert len(notes) == 1 and "no image for GPU 1 (NVIDIA GeForce RTX 5090" in notes[0]
    assert _warnings(_import(src, fake_nvml, both, CUDA_VISIBLE_DEVICES="GPU-fake-0")) == []
    refused = _import(src, fake_nvml, both, CUDA_VISIBLE_DEVICES="GPU-fake-1")
    assert refused.returncode == 1 and "cannot run on this machine's GPU" in refused.stderr
    # By index under CUDA's default order the mapping to NVML's is not certain: a warning.
    unsure = _warnings(_import(src, fake_nvml, both, CUDA_VISIBLE_DEVICES="1"))
    assert any("cannot run on this machine's GPU" in n for n in unsure)
    sure = _import(src, fake_nvml, both, CUDA_VISIBLE_DEVICES="1",
                   CUDA_DEVICE_ORDER="PCI_BUS_ID")
    assert sure.returncode == 1
    assert _warnings(_import(src, fake_nvml, RTX_5090, CUDA_VISIBLE_DEVICES="")) == []


def test_nvml_is_asked_no_more_than_the_verdict_needs(fake_nvml: Path, tmp_path: Path) -> None:
    """A GPU the package runs on: one NVML session (nvmlInit_v2: the no-attach init lists no
    GPU, so it would turn the check off), capabilities only. A refusal: a second session for
    the names it prints."""
    src = _package(tmp_path, "sass_sm90a.o")
    log = tmp_path / "nvml.log"
    assert _warnings(_import(src, fake_nvml, H100, FAKE_NVML_LOG=str(log))) == []
    assert log.read_text().split() == ["init_v2", "shutdown"]
    log.unlink()
    refused = _import(src, fake_nvml, RTX_5090, FAKE_NVML_LOG=str(log))
    assert refused.returncode == 1 and "NVIDIA GeForce RTX 5090" in refused.stderr
    assert log.read_text().split() == ["init_v2", "shutdown", "init_v2", "name", "shutdown"]
