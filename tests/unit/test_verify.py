"""verify_install on fake installed packages made of committed fixture binaries."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashbuild.arch import parse_arch_spec
from flashbuild.errors import VerifyError
from flashbuild.installing.manifest import Artifact, HostCompiler, Manifest, Toolkit
from flashbuild.platforms import get
from flashbuild.verifying.verify import Status, VerifyReport, verify_install
from tests.fakes import ReplayRunner

V = Path(__file__).resolve().parent.parent / "fixtures" / "verify"


def install(tmp_path: Path, binary: str, archs: str, platform: str = "linux") -> Path:
    pkg = tmp_path / "site" / "flashkern"
    pkg.mkdir(parents=True)
    shutil.copy(V / binary, pkg / binary)
    (pkg / "lib").mkdir()
    for lib in ("libflashbuild_gone.so", "libcudart.so.13"):
        (pkg / "lib" / lib).write_bytes(b"")
    Manifest(flashbuild="0.1.0", recipe="csrc", platform=platform, archs=archs,
             toolkit=Toolkit(root="/cuda", version="13.0"),
             host_compiler=HostCompiler(kind="gcc", version="12", path="/usr/bin/g++"),
             artifacts=(Artifact(path=binary, kind="module"),)).write(pkg)
    return pkg


def run(pkg: Path, arch: str | None = None, platform: str = "linux", *,
        strict: bool = True, allow_placeholders: bool = False) -> VerifyReport:
    runner = ReplayRunner()
    runner.add("ldconfig", "-p", out=(V / "ldconfig-p.txt").read_text())
    return verify_install(manifest_path=pkg, targets=parse_arch_spec(arch) if arch else None,
                          runner=runner, platform=get(platform), env={"PATH": "/usr/bin"},
                          import_module=False, run_gpu=False, strict_arch=strict,
                          allow_placeholders=allow_placeholders, preloaded_dirs=())


def by_status(report: VerifyReport, status: Status) -> list[str]:
    return [c.summary for c in report.checks if c.status is status]


def test_sass_for_the_target_passes(tmp_path: Path) -> None:
    report = run(install(tmp_path, "sass_ptx_sm120.o", "120"))
    assert report.ok, report.failures
    assert "sm_120 SASS present" in by_status(report, Status.OK)


def test_asked_sm120_found_only_compute90_ptx_fails(tmp_path: Path) -> None:
    report = run(install(tmp_path, "ptx_compute90.o", "90-virtual"), arch="sm_120")
    assert not report.ok
    fail, extra = [c for c in report.failures if c.area == "images"]
    assert fail.summary == "asked for sm_120, found no sm_120 SASS"
    assert "compute_90 PTX" in fail.evidence and "JIT" in fail.evidence
    # Strict by default: PTX of another compute arch is not the target's.
    assert extra.summary == "extra archs (not asked for): compute_90"
    (proof,) = report.binaries
    assert (proof.sass, proof.ptx, proof.missing, proof.extra) == (
        (), ("compute_90",), ("sm_120",), ("compute_90",))


def test_ptx_only_target_is_a_warning_naming_jit_cost(tmp_path: Path) -> None:
    report = run(install(tmp_path, "ptx_compute90.o", "90-virtual"))
    assert report.ok
    warn = next(c for c in report.warnings if c.area == "images")
    assert "PTX only" in warn.summary and "JIT-compiles" in warn.evidence


def test_missing_sass_in_multi_arch_build(tmp_path: Path) -> None:
    pkg = install(tmp_path, "multi.o", "90a-real;120a")
    report = run(pkg, arch="90a;100a;121", strict=False)
    # sm_100f SASS is not sm_100a: the build's arch check refuses it too (arch.satisfies).
    assert [c.summary for c in report.failures] == ["asked for sm_100a, found sm_100f SASS",
                                                    "asked for sm_121, found no sm_121 SASS"]
    assert "extra archs (not asked for): sm_120a, compute_120a" in by_status(report,
                                                                            Status.WARN)
    assert "sm_90a SASS present" in by_status(report, Status.OK)
    strict = run(pkg, arch="90a;100a;121")
    assert [c.summary for c in strict.failures] == [
        "asked for sm_100a, found sm_100f SASS", "asked for sm_121, found no sm_121 SASS",
        "extra archs (not asked for): sm_120a, compute_120a"]
    assert strict.to_json()["binaries"] == [{
        "subject": "multi.o", "path": str(pkg / "multi.o"), "kind": "module", "format": "elf",
        "readable": True, "gpu_code": True, "sass": ["sm_90a", "sm_100f", "sm_120a"],
        "ptx": ["compute_120a"], "missing": ["sm_100a", "sm_121"],
        "extra": ["sm_120a", "compute_120a"]}]


def test_corrupted_module_is_a_failure_not_a_traceback(tmp_path: Path) -> None:
    report = run(install(tmp_path, "truncated.o", "120"))
    (fail,) = report.failures
    assert fail.area == "binary" and "corrupted" in fail.summary and fail.fix


def test_missing_dependency_is_named(tmp_path: Path) -> None:
    pkg = install(tmp_path, "libmissing_dep.so", "90a-real")
    (pkg / "lib" / "libflashbuild_gone.so").unlink()
    report = run(pkg)
    assert [c.summary for c in report.failures] == ["needs libflashbuild_gone.so: not found"]


def test_windows_dll_missing_and_driver_warning(tmp_path: Path) -> None:
    pkg = install(tmp_path, "kern.dll", "120", platform="windows")
    shutil.copy(V / "helper.dll", pkg / "helper.dll")
    runner = ReplayRunner()
    report = verify_install(manifest_path=pkg, runner=runner, platform=get("windows"),
                            env={"SystemRoot": str(tmp_path / "nowin")}, import_module=False,
                            run_gpu=False)
    assert [c.summary for c in report.failures] == ["needs flashbuild_gone.dll: not found"]
    assert any("nvcuda.dll (NVIDIA driver)" in w for w in by_status(report, Status.WARN))
    assert runner.calls == []


def test_windows_venv_python_dll_resolves_beside_the_base_interpreter(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A venv's Scripts\\python.exe is a launcher: the base python.exe loads the .pyd, so
    # python311.dll (imported by every extension) is found beside the base interpreter that
    # pyvenv.cfg names, not in Scripts (the CI runners' case: setup-python + venv).
    from flashbuild.verifying import binaries

    pkg = install(tmp_path, "kern.dll", "120", platform="windows")
    base = tmp_path / "hostedtoolcache" / "Python" / "3.11.9" / "x64"
    base.mkdir(parents=True)
    (base / "python311.dll").write_bytes(b"")
    venv = tmp_path / "venv"
    (venv / "Scripts").mkdir(parents=True)
    (venv / "Scripts" / "python.exe").write_bytes(b"")
    (venv / "pyvenv.cfg").write_text(f"home = {base}\nversion = 3.11.9\n", encoding="utf-8")
    monkeypatch.setattr(binaries, "read_link_info", lambda path: binaries.LinkInfo(
        path, "pe", ("python311.dll",)))
    report = verify_install(manifest_path=pkg, runner=ReplayRunner(), platform=get("windows"),
                            env={"SystemRoot": str(tmp_path / "nowin")}, import_module=False,
                            run_gpu=False, python=str(venv / "Scripts" / "python.exe"))
    assert not [c for c in report.failures if c.area == "dependencies"], report.failures
    assert binaries.application_dir(base / "python.exe") == base  # no venv: its own folder


def test_folder_without_binaries_is_a_verify_error(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("no binaries here\n")
    with pytest.raises(VerifyError, match="holds no compiled extension module") as err:
        run(tmp_path)
    assert "no .so, .so.N, .pyd or .dll" in err.value.evidence and err.value.fix


def test_cli_json_and_exit_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flashbuild import cli
    from flashbuild.verifying import command

    pkg = install(tmp_path, "ptx_compute90.o", "90-virtual")

    def fake_verify(**kwargs: object) -> VerifyReport:
        return run(pkg, arch=str(kwargs["targets"]) if kwargs["targets"] else None)

    monkeypatch.setattr(command, "verify_install", fake_verify)
    result = CliRunner().invoke(cli.app, ["verify", str(pkg), "--arch", "sm120", "--json",
                                          "--no-gpu"])
    assert result.exit_code == 8, result.output
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["images"]["ptx_compute90.o"][0]["arch"] == "compute_90"
    ok = CliRunner().invoke(cli.app, ["verify", str(pkg), "--no-gpu"])
    assert ok.exit_code == 0, ok.output
    assert "PTX only" in ok.stdout
