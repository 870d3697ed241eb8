"""`flashbuild repair` on a Windows wheel: the never-bundle rule for the DLLs its modules
import (issue 31, item 2), read from the recorded mingw-built DLLs in tests/fixtures/verify
(kern.dll imports flashbuild_gone.dll, helper.dll, nvcuda.dll, kernel32.dll and msvcrt.dll)."""

from __future__ import annotations

from pathlib import Path

import pytest
from wheel.wheelfile import WheelFile

from flashbuild.errors import UsageError, VerifyError
from flashbuild.verifying import abi
from flashbuild.verifying.repair import repair_wheel

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "verify"
TAG = "cp312-cp312-win_amd64"


def _wheel(folder: Path, members: dict[str, str], tag: str = TAG) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"pkg-1.0-{tag}.whl"
    with WheelFile(path, "w") as wf:
        for arcname, fixture in members.items():
            wf.write(str(FIXTURES / fixture), arcname)
        wf.writestr("pkg/__init__.py", "")
        wf.writestr("pkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: pkg\n"
                    "Version: 1.0\n")
        wf.writestr("pkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\n"
                    f"Root-Is-Purelib: false\nTag: {tag}\n")
    return path


def test_an_import_nobody_provides_is_refused_by_name(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "in", {"pkg/_C.pyd": "kern.dll", "pkg/helper.dll": "helper.dll"})
    out = tmp_path / "out"
    with pytest.raises(VerifyError) as info:
        repair_wheel(wheel, policy="manylinux_2_28", out_dir=out)
    assert "pkg/_C.pyd imports flashbuild_gone.dll" in info.value.evidence
    assert "--exclude NAME.dll" in info.value.fix
    assert not out.exists()  # nothing written


def test_torch_cuda_and_the_driver_stay_outside_and_the_wheel_is_copied(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "in", {"pkg/_C.pyd": "kern.dll", "pkg/helper.dll": "helper.dll"})
    done = repair_wheel(wheel, policy="manylinux_2_28", out_dir=tmp_path / "out",
                        exclude=["FlashBuild_Gone.dll"])
    # helper.dll is inside the wheel, kernel32/msvcrt are the system's, nvcuda.dll the
    # driver's (never bundled) and the excluded one is left to a requirement.
    assert done.left_out == ("flashbuild_gone.dll", "nvcuda.dll")
    assert done.platform == "win_amd64"
    assert done.wheel == tmp_path / "out" / wheel.name
    assert done.wheel.read_bytes() == wheel.read_bytes()


def test_a_dll_the_wheel_does_not_hold_is_refused_even_when_another_module_has_it(
        tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "in", {"pkg/_C.pyd": "kern.dll"})
    with pytest.raises(VerifyError) as info:
        repair_wheel(wheel, policy="manylinux_2_28", out_dir=tmp_path / "out",
                     exclude=["flashbuild_gone.dll"])
    assert "imports helper.dll" in info.value.evidence


def test_repair_in_place_keeps_the_wheel(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, {"pkg/_C.pyd": "helper.dll"})
    before = wheel.read_bytes()
    done = repair_wheel(wheel, policy="manylinux_2_28", out_dir=tmp_path)
    assert done.wheel == wheel and wheel.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [wheel.name]


@pytest.mark.parametrize("dll", ["torch_cpu.dll", "c10.dll", "c10_cuda.dll",
                                 "cudart64_13.dll", "cublas64_13.dll", "nvcuda.dll"])
def test_torch_and_cuda_dlls_are_never_bundled(dll: str) -> None:
    import fnmatch

    assert any(fnmatch.fnmatchcase(dll, p) for p in abi.NEVER_BUNDLED_DLLS)
    assert not abi.windows_provided(dll)


@pytest.mark.parametrize("dll", ["kernel32.dll", "api-ms-win-crt-runtime-l1-1-0.dll",
                                 "python312.dll", "python3.dll", "vcruntime140.dll"])
def test_what_windows_and_python_provide(dll: str) -> None:
    assert abi.windows_provided(dll)


def test_a_pure_wheel_is_a_usage_error(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, {}, tag="py3-none-any")
    with pytest.raises(UsageError, match="not a Linux platform wheel"):
        repair_wheel(wheel, policy="manylinux_2_28", out_dir=tmp_path)
