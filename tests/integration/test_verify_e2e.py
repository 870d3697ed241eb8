"""verify end to end on real nvcc output, and the fatbin reader against cuobjdump."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

from flashbuild.arch import Suffix
from flashbuild.installing.manifest import Artifact, HostCompiler, Manifest, Toolkit
from flashbuild.proc import ProcessRunner
from flashbuild.verifying.fatbin import ImageKind, list_images
from flashbuild.verifying.verify import Status, verify_install

pytestmark = pytest.mark.integration
V = Path(__file__).resolve().parent.parent / "fixtures" / "verify"


def _cuobjdump() -> str | None:
    import importlib.util

    spec = importlib.util.find_spec("nvidia")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        exe = Path(folder) / "cu13" / "bin" / "cuobjdump"
        if exe.is_file():
            return str(exe)
    return shutil.which("cuobjdump")


@pytest.mark.parametrize("name", ["sass_sm90a.o", "sass_ptx_sm120.o", "ptx_compute90.o",
                                  "multi.o", "compressed_sm90.o", "libmissing_dep.so"])
def test_agrees_with_cuobjdump(name: str) -> None:
    exe = _cuobjdump()
    if exe is None:
        pytest.skip("cuobjdump not installed (pip install nvidia-cuda-cuobjdump)")
    out = ProcessRunner().run([exe, "--list-elf", "--list-ptx", str(V / name)]).stdout
    theirs = sorted(re.findall(r"^(ELF|PTX) file\s+\d+: .*\.(sm_\w+)\.(?:cubin|ptx)$", out,
                               re.MULTILINE))
    ours = []
    for image in list_images(V / name).images:
        # cuobjdump names family SASS by its base SM (sm_100f SASS prints as sm_100).
        arch = image.arch.base if (image.kind is ImageKind.SASS and
                                   image.arch.suffix is Suffix.FAMILY) else image.arch
        ours.append(("ELF" if image.kind is ImageKind.SASS else "PTX", arch.sm))
    assert sorted(ours) == theirs


INIT = '''"""A fake installed package: loads its nvcc-built module with ctypes."""
import ctypes, os
_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "libkern.so"))
launch = _lib.launch
'''
SRC = r'''
__global__ void scale(float* a) { a[threadIdx.x] *= 2.f; }
extern "C" int launch(float* a) { scale<<<1, 32>>>(a); return 0; }
'''


def build_package(tmp_path: Path, nvcc: Path, *, extra_lib: bool) -> Path:
    site = tmp_path / "site"
    pkg = site / "fakekern"
    pkg.mkdir(parents=True)
    (tmp_path / "k.cu").write_text(SRC)
    argv = [str(nvcc), "-shared", "-Xcompiler", "-fPIC", "-cudart", "static",
            "-gencode", "arch=compute_90a,code=sm_90a", "-o", str(pkg / "libkern.so"),
            str(tmp_path / "k.cu"), "-Xptxas", "-v"]
    if extra_lib:
        (tmp_path / "gone.c").write_text("int gone(void) { return 1; }\n")
        ProcessRunner().run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "libgone.so"),
                             str(tmp_path / "gone.c")])
        argv += ["-L", str(tmp_path), "-Xlinker", "--no-as-needed", "-lgone"]
    done = ProcessRunner().run(argv, timeout=300)
    (pkg / "__init__.py").write_text(INIT)
    Manifest(flashbuild="0.1.0", recipe="test", platform="linux", archs="90a-real",
             toolkit=Toolkit(root="/usr/local/cuda", version="13.0"),
             host_compiler=HostCompiler(kind="gcc", version="", path="gcc"),
             artifacts=(Artifact(path="libkern.so", kind="module"),),
             exports=("launch",), ptxas_info=done.output).write(pkg)
    return pkg


def test_verify_real_package_then_missing_dependency(tmp_path: Path,
                                                     cuda_toolkit_root: Path) -> None:
    pkg = build_package(tmp_path, cuda_toolkit_root / 'bin' / 'nvcc', extra_lib=True)
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(tmp_path)}
    report = verify_install(manifest_path=pkg, runner=ProcessRunner(), env=env,
                            python=sys.executable, run_gpu=False)
    assert report.ok, [c.to_json() for c in report.failures]
    statuses = {(c.area, c.status) for c in report.checks}
    assert ("import", Status.OK) in statuses and ("exports", Status.OK) in statuses
    assert ("resources", Status.OK) in statuses
    # The planted fault: the library it links against disappears.
    (tmp_path / "libgone.so").unlink()
    report = verify_install(manifest_path=pkg, runner=ProcessRunner(), env=env,
                            python=sys.executable, run_gpu=False)
    failed = {c.area: c for c in report.failures}
    assert failed["dependencies"].summary == "needs libgone.so: not found"
    assert "libgone.so" in failed["import"].evidence
    assert "missing" in failed["import"].fix


def test_verify_catches_missing_export_and_wrong_arch(tmp_path: Path,
                                                       cuda_toolkit_root: Path) -> None:
    pkg = build_package(tmp_path, cuda_toolkit_root / 'bin' / 'nvcc', extra_lib=False)
    from flashbuild.arch import parse_arch_spec

    report = verify_install(manifest_path=pkg, runner=ProcessRunner(), python=sys.executable,
                            targets=parse_arch_spec("sm_120"), exports=["launch", "nope"],
                            run_gpu=False)
    summaries = [c.summary for c in report.failures]
    assert "asked for sm_120, found no sm_120 SASS" in summaries
    assert "missing exports: nope" in summaries
