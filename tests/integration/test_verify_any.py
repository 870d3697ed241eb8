"""verify on binaries built without flashbuild: real nvcc shared libraries for sm_90a and
sm_80 (the PyPI toolkit fixture), one wrapped into a wheel with the `wheel` package and also
unpacked as an installed distribution. Runs here (no GPU needed: everything is static except
the import, which loads the library with ctypes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from flashbuild.arch import parse_arch_spec
from flashbuild.proc import ProcessRunner
from flashbuild.verifying.verify import Status, VerifyReport, verify_install

pytestmark = pytest.mark.integration

SRC = r'''
namespace demo {
template <typename T> __global__ void scale_kernel(T* a) { a[threadIdx.x] *= T(2); }
template __global__ void scale_kernel<float>(float*);
}
extern "C" __global__ void fill_ones(int* a) { a[threadIdx.x] = 1; }
extern "C" int launch(float* a) { demo::scale_kernel<<<1, 32>>>(a); return 0; }
'''
INIT = '''"""A kernel package built by hand with nvcc (no flashbuild, no manifest)."""
import ctypes, glob, os
_lib = ctypes.CDLL(glob.glob(os.path.join(os.path.dirname(__file__), "_kern*.so"))[0])
launch = _lib.launch
'''
EXT = str(sysconfig.get_config_var("EXT_SUFFIX"))


@pytest.fixture(scope="session")
def libs(tmp_path_factory: pytest.TempPathFactory, cuda_toolkit_root: Path) -> dict[str, Path]:
    """`sm_90a` and `sm_80` shared libraries of the same source, compiled by nvcc directly."""
    work = tmp_path_factory.mktemp("verify-any")
    (work / "k.cu").write_text(SRC)
    out = {}
    for arch in ("sm_90a", "sm_80"):
        target = work / f"libk_{arch}.so"
        ProcessRunner().run([str(cuda_toolkit_root / "bin" / "nvcc"), "-shared", "-Xcompiler",
                             "-fPIC", "-cudart", "static", "-gencode",
                             f"arch=compute_{arch[3:]},code={arch}", "-o", str(target),
                             str(work / "k.cu")], timeout=600)
        out[arch] = target
    return out


def verify(path: Path | None, arch: str, **kwargs: object) -> VerifyReport:
    return verify_install(path=path, targets=parse_arch_spec(arch), runner=ProcessRunner(),
                          python=sys.executable, run_gpu=False,
                          **kwargs)  # type: ignore[arg-type]


def make_wheel(lib: Path, dist: Path) -> Path:
    """A regular wheel (RECORD with hashes) written by the `wheel` package, as pip builds
    them."""
    from wheel.wheelfile import WheelFile

    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    path = dist / f"handkern-1.0-{tag}-{tag}-linux_x86_64.whl"
    with WheelFile(path, "w") as wf:
        wf.writestr("handkern/__init__.py", INIT)
        wf.write(str(lib), f"handkern/_kern{EXT}")
        wf.writestr("handkern-1.0.dist-info/METADATA",
                    "Metadata-Version: 2.1\nName: handkern\nVersion: 1.0\n")
        wf.writestr("handkern-1.0.dist-info/top_level.txt", "handkern\n")
        wf.writestr("handkern-1.0.dist-info/WHEEL",
                    f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\n"
                    f"Tag: {tag}-{tag}-linux_x86_64\n")
    return path


def test_a_plain_nvcc_library_for_the_target_passes(libs: dict[str, Path]) -> None:
    report = verify(libs["sm_90a"], "sm_90a", kernels=("scale_kernel", "fill_ones"))
    assert report.ok, [c.to_json() for c in report.failures]
    (proof,) = report.binaries
    assert (proof.sass, proof.ptx, proof.missing, proof.extra) == (("sm_90a",), (), (), ())
    assert "all 2 listed kernels present in the sm_90 cubins" in [
        c.summary for c in report.checks if c.status is Status.OK]
    assert report.manifest_path is None and report.subject_kind == "binary"


def test_the_other_arch_fails_missing_and_extra(libs: dict[str, Path]) -> None:
    report = verify(libs["sm_80"], "sm_90a", kernels=("scale_kernel",))
    assert [c.summary for c in report.failures if c.area == "images"] == [
        "asked for sm_90a, found no sm_90a SASS", "extra archs (not asked for): sm_80"]
    assert report.binaries[0].missing == ("sm_90a",)
    assert report.binaries[0].extra == ("sm_80",)
    # Kernels are judged on the target's cubins; there are none, so they are not judged.
    assert not [c for c in report.checks if c.area == "kernels" and c.status is Status.OK]
    loose = verify(libs["sm_80"], "sm_80;sm_90a", strict_arch=False)
    assert [c.summary for c in loose.failures] == ["asked for sm_90a, found no sm_90a SASS"]


def test_a_wheel_built_without_flashbuild(libs: dict[str, Path], tmp_path: Path) -> None:
    wheel = make_wheel(libs["sm_90a"], tmp_path)
    good = verify(wheel, "sm_90a")
    assert good.ok, [c.to_json() for c in good.failures]
    assert [b.subject for b in good.binaries] == [f"handkern/_kern{EXT}"]
    bad = verify(wheel, "sm_120")
    assert bad.binaries[0].missing == ("sm_120",) and bad.binaries[0].extra == ("sm_90a",)
    # Through the CLI, from the wheel's folder with a relative path, as a user runs it.
    done = subprocess.run([sys.executable, "-m", "flashbuild", "verify", wheel.name,
                           "--arch", "sm_90a", "--json"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert doc["kind"] == "wheel" and doc["binaries"][0]["sass"] == ["sm_90a"]


def test_the_wheel_installed_is_found_and_imported(libs: dict[str, Path], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # Unpacked as pip installs it (files + dist-info) into a site folder on the path.
    site = tmp_path / "site"
    with zipfile.ZipFile(make_wheel(libs["sm_90a"], tmp_path)) as zf:
        zf.extractall(site)
    monkeypatch.syspath_prepend(str(site))
    env = {**os.environ, "PYTHONPATH": str(site)}
    report = verify(None, "sm_90a", package="handkern", exports=("launch", "nope"), env=env)
    assert report.subject_kind == "package"
    assert [c.summary for c in report.failures] == ["missing exports: nope"]
    imported = next(c for c in report.checks if c.area == "import")
    assert imported.status is Status.OK and str(site / "handkern") in imported.summary
