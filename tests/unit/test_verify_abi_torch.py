"""verify's torch, abi3 and .pyd checks (issue 31 item 6): the torch recorded at build time
against the torch installed, and a Windows module's DLL imports."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from flashbuild.arch import parse_arch_spec
from flashbuild.installing.manifest import Manifest
from flashbuild.pipeline.driver import build_manifest
from flashbuild.runner import Completed
from flashbuild.verifying.abi import pe_findings, pe_imports, torch_version_finding
from flashbuild.verifying.inputs import Binary, Subject
from flashbuild.verifying.verify import Status, _stable_abi_checks, _torch_checks

from .test_verify_manifest import sample

# A real PE from the venv (pip's vendored distlib launcher): its import table names
# KERNEL32.dll, which the fixture renames in place to a DLL of the same length.
_LAUNCHER = Path(sys.prefix, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}",
                 "site-packages", "pip", "_vendor", "distlib", "t64.exe")


def test_other_minor_release_is_an_error_naming_both() -> None:
    found = torch_version_finding("2.11.0+cu130", "2.13.0+cpu")
    assert found.severity == "error"
    assert "2.11.0+cu130" in found.summary and "2.13.0+cpu" in found.summary
    assert "torch==2.11.0" in found.fix and "rebuild" in found.fix


def test_local_suffix_only_is_a_note() -> None:
    assert torch_version_finding("2.13.0+cu130", "2.13.0+cpu").severity == "note"
    assert torch_version_finding("2.13.0+cpu", "2.13.0+cpu").severity == "ok"


def test_manifest_records_the_torch_and_round_trips(tmp_path: Path) -> None:
    m = sample(torch_version="2.13.0+cu130")
    m.write(tmp_path)
    assert Manifest.load(tmp_path).torch_version == "2.13.0+cu130"
    # A manifest without torch keeps its old bytes.
    assert "torch_version" not in sample().to_json()


class _Runner:
    """Answers the torch probe as the target interpreter would."""

    def __init__(self, version: str, lib: Path) -> None:
        self.answer = json.dumps({"version": version, "lib": str(lib)})

    def run(self, argv: object, **kwargs: object) -> Completed:
        return Completed(argv=("python",), returncode=0, stdout=self.answer + "\n", stderr="")

    def which(self, program: str, env: object = None) -> str | None:
        return None


def test_verify_compares_the_manifest_torch_with_the_installed(tmp_path: Path) -> None:
    subject = Subject(kind="manifest", label=str(tmp_path), binaries=(),
                      manifest=sample(torch_version="2.11.0+cu130"), package="pkg")
    checks = _torch_checks(subject, runner=_Runner("2.13.0+cpu", tmp_path),  # type: ignore[arg-type]
                           python="python", env={})
    assert [(c.area, c.status) for c in checks] == [("abi", Status.FAIL)]
    assert "2.11.0+cu130" in checks[0].summary and "2.13.0+cpu" in checks[0].summary


def test_pe_import_rules() -> None:
    found = pe_findings("m.pyd", ["vcruntime140d.dll", "msvcp140.dll", "python311.dll"],
                        abi3=True)
    assert [f.severity for f in found] == ["error", "note", "error"]
    assert "python311.dll" in found[2].summary
    assert pe_findings("m.pyd", ["python3.dll", "kernel32.dll"], abi3=True) == []
    assert pe_findings("m.pyd", ["python311.dll"], abi3=False) == []


@pytest.mark.skipif(not _LAUNCHER.is_file(), reason="pip's distlib launcher is not in this venv")
def test_abi3_wheel_whose_pyd_imports_a_versioned_python(tmp_path: Path) -> None:
    data = _LAUNCHER.read_bytes()
    assert data.count(b"KERNEL32.dll") == 1
    pyd = tmp_path / "_C.pyd"
    pyd.write_bytes(data.replace(b"KERNEL32.dll", b"python39.dll"))
    assert "python39.dll" in pe_imports(pyd)
    binary = Binary(path=pyd, subject="pkg/_C.pyd", kind="module", required=True)
    abi3 = Subject(kind="wheel", label=str(tmp_path / "pkg-1.0-cp39-abi3-win_amd64.whl"),
                   binaries=(binary,))
    checks = _stable_abi_checks(abi3)
    assert [c.status for c in checks] == [Status.FAIL]
    assert "python39.dll" in checks[0].summary
    plain = Subject(kind="wheel", label=str(tmp_path / "pkg-1.0-cp39-cp39-win_amd64.whl"),
                    binaries=(binary,))
    assert _stable_abi_checks(plain) == []


def test_the_build_writes_the_backend_torch_into_the_manifest() -> None:
    # Only the fields build_manifest reads; the setuptools backend fills torch_version.
    request = SimpleNamespace(
        toolkit=SimpleNamespace(root="/cuda", release="13.0", version="13.0"),
        recipe=SimpleNamespace(name="r", build=SimpleNamespace(backend="setuptools"),
                               verify=SimpleNamespace(exports=(), kernels=(),
                                                      dynamic_smem={})),
        platform=SimpleNamespace(name="linux"), arch=parse_arch_spec("sm_90"),
        host_compiler=SimpleNamespace(kind="gcc", version="12", path="/usr/bin/g++"))
    outcome = SimpleNamespace(applied=(), build_excludes=())
    built = SimpleNamespace(flags={}, artifacts=(), torch_version="2.13.0+cu130")
    manifest = build_manifest(request, outcome, built, (), ptxas_info=None)  # type: ignore[arg-type]
    assert manifest.torch_version == "2.13.0+cu130"
    assert manifest.to_json()["torch_version"] == "2.13.0+cu130"
