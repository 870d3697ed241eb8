"""`doctor --packages` on a fake site-packages: distributions whose RECORD lists the committed
fatbin objects (tests/fixtures/verify) as their `.so` files, judged for sm_120 and sm_90a."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashbuild.arch import parse_arch_spec
from flashbuild.cli import app
from flashbuild.detect.gpu import Gpu, GpuReport
from flashbuild.pipeline import installed
from flashbuild.pipeline.installed import (
    Fit,
    PackagesReport,
    arch_targets,
    check_packages,
    gpu_targets,
)

V = Path(__file__).resolve().parent.parent / "fixtures" / "verify"


def add_distribution(site: Path, name: str, version: str, files: dict[str, Path | bytes],
                     ) -> None:
    """A `NAME-VERSION.dist-info` with METADATA and a RECORD listing `files` (each copied from
    a fixture or written from bytes), as pip leaves it."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = []
    for rel, source in files.items():
        target = site / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(source, Path):
            shutil.copyfile(source, target)
        else:
            target.write_bytes(source)
        lines.append(f"{rel},sha256=x,{target.stat().st_size}")
    lines.append(f"{info.name}/RECORD,,")
    (info / "RECORD").write_text("\n".join(lines) + "\n")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = tmp_path / "site-packages"
    add_distribution(site, "fa3", "0.1", {
        "fa3/__init__.py": b"", "fa3/_C.cpython-311-x86_64-linux-gnu.so": V / "sass_sm90a.o"})
    # An extension installed beside its package (causal-conv1d's shape).
    add_distribution(site, "ptx-only", "1.0", {
        "ptx_only/__init__.py": b"",
        "ptx_only_cuda.cpython-311-x86_64-linux-gnu.so": V / "ptx_compute90.o"})
    # A library loaded with ctypes, with a versioned name, and a host-only helper beside it.
    add_distribution(site, "blackwell", "2.0", {
        "blackwell/lib/libkern.so.1": V / "sass_ptx_sm120.o",
        "blackwell/_helper.pyd": V / "helper.dll"})
    add_distribution(site, "broken", "0.0", {"broken/_ext.so": V / "truncated.o"})
    add_distribution(site, "hostonly", "1.0", {"hostonly/_x.pyd": V / "helper.dll"})
    add_distribution(site, "pure", "3.0", {"pure/__init__.py": b""})
    return site


def fits(report: PackagesReport) -> dict[str, list[str]]:
    return {r.package.name: [str(v.fit) for v in r.verdicts] for r in report.packages}


def check(site: Path, arch: str) -> PackagesReport:
    return check_packages([site], arch_targets(parse_arch_spec(arch)), origin="--arch")


def test_verdicts_for_an_sm_120_gpu(site: Path) -> None:
    report = check(site, "sm_120")
    assert fits(report) == {"blackwell": ["ok"], "broken": ["unreadable"], "fa3": ["fails"],
                            "ptx-only": ["jit"]}
    assert not report.ok
    assert report.distributions == 6 and report.binaries == 6
    fa3 = next(r for r in report.packages if r.package.name == "fa3")
    (verdict,) = fa3.verdicts
    assert [b.file for b in verdict.at_fault] == ["fa3/_C.cpython-311-x86_64-linux-gnu.so"]
    assert "sm_90a SASS" in verdict.explain() and "no kernel image" in verdict.explain()
    blackwell = next(r for r in report.packages if r.package.name == "blackwell")
    assert blackwell.package.host_only == 1
    assert [b.images for b in blackwell.package.binaries] == [("sm_120", "compute_120")]


def test_verdicts_for_an_sm_90a_target(site: Path) -> None:
    """`--arch sm_90a` is a GPU of compute capability 9.0: the `a` image runs there, sm_120
    SASS and compute_120 PTX do not, compute_90 PTX is JIT-compiled."""
    report = check(site, "sm_90a")
    assert [t.sm for t in report.targets] == ["sm_90"]
    assert fits(report) == {"blackwell": ["fails"], "broken": ["unreadable"], "fa3": ["ok"],
                            "ptx-only": ["jit"]}


def test_an_a_image_does_not_run_on_a_later_minor(site: Path) -> None:
    assert fits(check(site, "sm_121"))["fa3"] == ["fails"]
    assert fits(check(site, "sm_121"))["blackwell"] == ["ok"]  # sm_120 SASS runs on 12.1


def test_two_targets_give_a_verdict_each(site: Path) -> None:
    report = check(site, "90a;120")
    assert fits(report)["fa3"] == ["ok", "fails"]
    assert next(r for r in report.packages if r.package.name == "fa3").fit is Fit.FAILS


def test_damage_is_a_row_not_a_crash(site: Path, tmp_path: Path) -> None:
    fifo = site / "pipe" / "_p.so"
    add_distribution(site, "pipe", "1.0", {"pipe/__init__.py": b""})
    fifo.parent.mkdir(exist_ok=True)
    os.mkfifo(fifo)
    record = next(site.glob("pipe-*.dist-info")) / "RECORD"
    record.write_text(record.read_text() + "pipe/_p.so,,\npipe/gone.so,,\n")
    bad = site / "garbage-1.0.dist-info"
    bad.mkdir()
    (bad / "METADATA").write_text("Metadata-Version: 2.1\nName: garbage\nVersion: 1.0\n")
    (bad / "RECORD").write_bytes(b"\xff\xfe\x00garbage.so,\x00\n")
    report = check(site, "sm_120")
    broken = next(r for r in report.packages if r.package.name == "broken")
    assert "damaged" in broken.package.binaries[0].error
    pipe = next(r for r in report.packages if r.package.name == "pipe")
    errors = {b.file: b.error for b in pipe.package.binaries}
    assert "not a regular file" in errors["pipe/_p.so"]
    assert errors["pipe/gone.so"] == "listed in RECORD but not installed"
    assert [n for n, _ in report.problems] == ["garbage"]
    # Unreadable is a warning: nothing here is known to fail on sm_120 but fa3.
    assert fits(report)["pipe"] == ["unreadable"]


def test_the_first_site_folder_wins(site: Path, tmp_path: Path) -> None:
    other = tmp_path / "user-site"
    add_distribution(other, "fa3", "0.2", {"fa3/_C.so": V / "sass_ptx_sm120.o"})
    report = check_packages([other, site], arch_targets(parse_arch_spec("sm_120")),
                            origin="--arch")
    fa3 = next(r for r in report.packages if r.package.name == "fa3")
    assert fa3.package.version == "0.2" and fa3.fit is Fit.OK


def test_gpus_become_one_target_per_capability() -> None:
    report = GpuReport((Gpu(0, "NVIDIA H100", (9, 0), None), Gpu(1, "NVIDIA H100", (9, 0), None),
                        Gpu(2, "NVIDIA GeForce RTX 5090", (12, 0), None)), "580", None, "nvml")
    targets = gpu_targets(report)
    assert [(t.sm, t.gpus) for t in targets] == [
        ("sm_90", "NVIDIA H100 (GPU 0, 1)"), ("sm_120", "NVIDIA GeForce RTX 5090 (GPU 2)")]
    assert gpu_targets(None) == ()


def test_without_a_target_images_are_listed_not_judged(site: Path) -> None:
    report = check_packages([site], (), origin="gpus")
    assert report.target_origin == "none" and report.ok
    assert fits(report) == {"blackwell": [], "broken": [], "fa3": [], "ptx-only": []}


def _cli(site: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(installed, "default_site_packages", lambda: (site,))
    result = CliRunner().invoke(app, ["doctor", "--packages", *args])
    return result.exit_code, result.stdout


def test_cli_json_document(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = _cli(site, monkeypatch, "--arch", "sm_120", "--json")
    assert code == 3
    document = json.loads(out)
    assert document["schema_version"] == 1 and document["ok"] is False
    assert set(document) == {"schema_version", "ok", "site_packages", "targets",
                             "target_origin", "packages", "problems", "scanned"}
    assert document["targets"] == [{"sm": "sm_120", "compute_capability": "12.0",
                                    "gpus": None}]
    assert document["target_origin"] == "--arch"
    fa3 = next(p for p in document["packages"] if p["name"] == "fa3")
    assert fa3["verdict"] == "fails" and fa3["version"] == "0.1"
    assert fa3["verdicts"][0] | {"explanation": ""} == {
        "target": "sm_120", "verdict": "fails", "severity": "error", "explanation": "",
        "binaries": ["fa3/_C.cpython-311-x86_64-linux-gnu.so"]}
    assert fa3["binaries"][0]["sass"] == ["sm_90a"] and fa3["binaries"][0]["ptx"] == []
    ptx = next(p for p in document["packages"] if p["name"] == "ptx-only")
    assert ptx["verdicts"][0]["severity"] == "warn"
    assert set(document["scanned"]) == {"distributions", "binaries", "seconds"}


def test_cli_exit_0_when_nothing_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    add_distribution(site, "blackwell", "2.0", {"blackwell/lib/libkern.so": V / "sass_ptx_sm120.o"})
    code, out = _cli(site, monkeypatch, "--arch", "sm_120")
    assert code == 0, out
    assert "blackwell 2.0" in out and "ok" in out
    code, out = _cli(site, monkeypatch, "--arch", "sm_90")
    assert code == 3 and "fails" in out


def test_cli_table_fits_80_columns(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The table is drawn within 80 columns; the verdict lines below it are doctor's (long
    ones left for the terminal to wrap, so a path is never split)."""
    monkeypatch.setenv("COLUMNS", "80")
    code, out = _cli(site, monkeypatch, "--arch", "sm_120")
    assert code == 3
    box = [line for line in out.splitlines() if line[:1] in set("┏┃┡│└+|")]
    assert len(box) == 8 and {len(line) for line in box} == {len(box[0])} and len(box[0]) <= 80
    assert "fa3 0.1" in out and "would fail" in out
    assert "  error fa3 0.1: no image runs on sm_120" in out
    assert "        fa3/_C.cpython-311-x86_64-linux-gnu.so: sm_90a SASS" in out
    words = {line.split()[0] for line in out.splitlines() if line.startswith("  ")
             and not line.startswith("   ")}
    assert words == {"error", "warn"}


def test_bad_arch_is_a_usage_error(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, _out = _cli(site, monkeypatch, "--arch", "banana")
    assert code == 2


def test_a_gpu_module_without_a_kernel_fails_nowhere(tmp_path: Path) -> None:
    """A library whose only GPU code is a module without a kernel (cuFFT 12's libcufftw.so.12:
    one sm_75 cubin, no kernel; called "fails" on an H100 before) has nothing to launch: it
    counts as host-only. Beside it, a real sm_90a-only module still fails on sm_120."""
    site = tmp_path / "site-packages"
    add_distribution(site, "fftish", "12.0", {
        "fftish/lib/libfftw_compat.so.12": V / "nokernel_sm75.o",
        "fftish/lib/libfft.so.12": V / "sass_sm90a.o"})
    report = check(site, "sm_120")
    (row,) = report.packages
    assert [str(v.fit) for v in row.verdicts] == ["fails"]
    assert [b.file for b in row.verdicts[0].at_fault] == ["fftish/lib/libfft.so.12"]
    assert row.package.host_only == 1
    assert fits(check(site, "sm_90a")) == {"fftish": ["ok"]}
