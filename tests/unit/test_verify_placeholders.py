"""Placeholder kernels (a body that only traps) in committed cubins: the reader, the verify
check's fail / warn / pass, and the CLI's exit code."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from flashbuild.arch import parse_arch, parse_arch_spec
from flashbuild.building.artifacts import BuiltArtifact
from flashbuild.pipeline.driver import _placeholder_notes
from flashbuild.verifying.fatbin import list_images
from flashbuild.verifying.placeholders import (
    OP_BPT,
    OP_BRA,
    OP_EXIT,
    Body,
    branch_target,
    judge,
    placeholder_report,
    read_cubin,
    short_name,
)
from flashbuild.verifying.verify import Status, VerifyReport
from tests.unit.test_verify import install, run

V = Path(__file__).resolve().parent.parent / "fixtures" / "verify"


def bodies(binary: str, arch: str) -> dict[str, Body]:
    (entry,) = [r for r in placeholder_report(V / binary) if r.arch == arch]
    assert entry.error == ""
    return {k.short: k.body for k in entry.kernels}


def test_reader_tells_placeholders_per_arch() -> None:
    assert bodies("placeholders.o", "sm_90a") == {
        "arch_gated": Body.REAL, "checked": Body.REAL, "trap_only": Body.PLACEHOLDER,
        "unsupported": Body.PLACEHOLDER}
    # sm_120 takes the `if (thread0()) { printf; trap; }` branch: the other threads exit.
    assert bodies("placeholders.o", "sm_120")["arch_gated"] is Body.PLACEHOLDER
    assert bodies("placeholders.o", "sm_120")["checked"] is Body.REAL


def test_report_filters_by_arch_and_names_mangled_kernels() -> None:
    (entry,) = placeholder_report(V / "placeholders.o", [parse_arch("sm_120").arch])
    assert entry.arch == "sm_120" and entry.binary == V / "placeholders.o"
    assert {k.name for k in entry.placeholders} == {
        "_Z10arch_gatedPfi", "_Z9trap_onlyPf", "_Z11unsupportedPfi"}
    assert [k.name for k in entry.real] == ["_Z7checkedPfi"]
    assert entry.to_json()["kernels"] == 4


def test_sm87_prologue_branch_is_followed() -> None:
    # sm_87 opens every kernel with `@P0 BRA` over a BMOV block; the trap still dominates.
    found = read_cubin((V / "placeholders_sm87.cubin").read_bytes(),
                       arch=parse_arch("sm_87").arch)
    assert {k.short: k.body for k in found} == {"arch_gated": Body.REAL,
                                                "trap_only": Body.PLACEHOLDER}


def test_unchecked_arch_is_not_read() -> None:
    (image,) = [i for i in list_images(V / "placeholders.o").sass if i.name == "sm_120"]
    found = read_cubin(image.data(), arch=parse_arch("sm_72").arch)
    assert found and {k.body for k in found} == {Body.NOT_READ}
    assert "not checked" in found[0].why


def _insn(op: int, *, guard: int = 0x7, hi: int = 0, high_lo: int = 0) -> bytes:
    return struct.pack("<QQ", high_lo | guard << 12 | op, hi)


TRAP = _insn(OP_BPT, hi=3 << 20, high_lo=4 << 32)


def test_judge_rules_on_hand_made_code() -> None:
    exit_ = _insn(OP_EXIT)
    assert judge(TRAP, sm=90)[0] is Body.PLACEHOLDER  # no EXIT at all
    assert judge(_insn(OP_EXIT, guard=0x0) + TRAP + exit_, sm=90)[0] is Body.PLACEHOLDER
    assert judge(_insn(OP_BPT, guard=0x0, hi=3 << 20) + exit_, sm=90)[0] is Body.REAL
    assert judge(exit_ + TRAP, sm=90)[0] is Body.REAL
    # A BPT that is not TRAP and `@!PT` never count.
    assert judge(_insn(OP_BPT, hi=1 << 20), sm=90) == (Body.REAL, "no trap")
    assert judge(_insn(OP_BPT, guard=0xF, hi=3 << 20) + exit_, sm=90)[0] is Body.REAL
    # A backward branch (a loop) before the trap is real work.
    back = _insn(OP_BRA, high_lo=0xFFFFFFE0 << 32, hi=0x3FFFF)
    assert judge(_insn(0x7802) + back + TRAP + exit_, sm=80)[0] is Body.REAL


def test_branch_offsets_per_family() -> None:
    # sm_80: `@P0 BRA` +0x120 bytes (bits 32-81); sm_90+: +0x24 words (bits 16-23).
    assert branch_target(0x0000012000000947, 0x000FEA0003800000, 0x10, code=87) == 0x140
    assert branch_target(0x0000000000240947, 0x000FEA0003800000, 0x120, code=90) == 0x1C0
    assert branch_target(0xFFFFFFFC00FC7947, 0x000FC0000383FFFF, 0x20, code=120) == 0x20
    assert branch_target(0x0000006100207547, 0x002FEA000B800000, 0x80, code=120) == 0x6110


def test_short_names() -> None:
    assert short_name("_Z10arch_gatedPfi") == "arch_gated"
    assert short_name("_ZN5flash21flash_fwd_splitkv_mlaI6TraitsILi64EEEEvT_") == (
        "flash::flash_fwd_splitkv_mla<…>")
    assert short_name("_Z6kernelILi3EEvPf") == "kernel<…>"
    assert short_name("plain_c_kernel") == "plain_c_kernel"


def _placeholder_checks(report: VerifyReport) -> list[tuple[Status, str]]:
    return [(c.status, c.summary) for c in report.checks
            if c.area == "kernels" and "placeholder" in c.summary]


def test_verify_warns_on_some_placeholders(tmp_path: Path) -> None:
    """One compiled unit, some of its kernels placeholders: a warning on each arch."""
    report = run(install(tmp_path, "placeholders.o", "90a;120"), arch="sm_90a;sm_120")
    assert report.ok, report.failures
    warns = [c for c in report.warnings if c.area == "kernels"]
    assert [c.subject for c in warns] == ["flashkern (sm_90a)", "flashkern (sm_120)"]
    assert warns[1].summary.startswith("3 of 4 kernel(s) are placeholders on sm_120: ")
    assert "arch_gated" in warns[1].summary and "arch_gated" not in warns[0].summary
    assert "only traps" in warns[1].evidence
    doc = report.to_json()["placeholders"]
    assert isinstance(doc, list) and [d["arch"] for d in doc] == ["sm_90a", "sm_120"]


def test_verify_fails_when_most_units_only_trap(tmp_path: Path) -> None:
    """Three compiled units (placeholders_units.o): on sm_120 every kernel of two of them traps
    (FlashMLA's shape there: its arch units dead, its helpers alive) and verify fails; on
    sm_90a all run. --allow-placeholders makes the sm_120 verdict a warning."""
    report = run(install(tmp_path, "placeholders_units.o", "90a;120"), arch="sm_90a;sm_120")
    (fail,) = [c for c in report.failures if c.area == "kernels"]
    assert fail.subject == "flashkern (sm_120)"
    assert fail.summary == ("2 of 3 kernel(s) are placeholders on sm_120, in 2 of the 3 "
                            "compiled units that define kernels every kernel traps: gated_a, "
                            "gated_b")
    assert "--allow-placeholders" in fail.fix
    assert not [c for c in report.warnings if c.area == "kernels"]  # sm_90a: none
    allowed = run(install(tmp_path / "again", "placeholders_units.o", "90a;120"),
                  arch="sm_90a;sm_120", allow_placeholders=True)
    assert allowed.ok, allowed.failures
    assert [c.subject for c in allowed.warnings if c.area == "kernels"] == ["flashkern (sm_120)"]
    only = run(install(tmp_path / "only", "placeholders_only.o", "120"), arch="sm_120",
               allow_placeholders=True)
    assert not only.ok  # every kernel a placeholder fails whatever the switch


def test_verify_fails_when_every_kernel_is_a_placeholder(tmp_path: Path) -> None:
    report = run(install(tmp_path, "placeholders_only.o", "120"), arch="sm_120")
    (fail,) = [c for c in report.failures if c.area == "kernels"]
    assert fail.summary == ("all 2 kernel(s) read are placeholders on sm_120: trap_only, "
                            "arch_gated")
    assert "`#if __CUDA_ARCH__` branch this arch takes" in fail.evidence
    assert "build for the arch the kernels are written for" in fail.fix


def test_verify_passes_without_placeholders(tmp_path: Path) -> None:
    report = run(install(tmp_path, "resources_sm120.o", "120"), arch="sm_120")
    assert report.ok, report.failures
    assert "2 kernel(s) read on sm_120: none is a trap-only placeholder" in [
        c.summary for c in report.checks if c.status is Status.OK]
    assert {status for status, _ in _placeholder_checks(report)} == {Status.OK}


def test_cli_exits_8_naming_the_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flashbuild import cli
    from flashbuild.verifying import command

    pkg = install(tmp_path, "placeholders_only.o", "120")

    def fake_verify(**kwargs: object) -> VerifyReport:
        return run(pkg, arch=str(kwargs["targets"]))

    monkeypatch.setattr(command, "verify_install", fake_verify)
    human = CliRunner().invoke(cli.app, ["verify", str(pkg), "--arch", "sm120", "--no-gpu"])
    assert human.exit_code == 8, human.output
    assert "placeholders on sm_120: trap_only, arch_gated" in human.stdout
    result = CliRunner().invoke(cli.app, ["verify", str(pkg), "--arch", "sm120", "--json",
                                          "--no-gpu"])
    assert result.exit_code == 8, result.output
    (entry,) = json.loads(result.stdout)["placeholders"]
    assert {k["short"] for k in entry["placeholders"]} == {"arch_gated", "trap_only"}


def test_manifest_archs_are_the_targets(tmp_path: Path) -> None:
    report = run(install(tmp_path, "placeholders_only.o", "120"))
    assert [status for status, _ in _placeholder_checks(report)] == [Status.FAIL]
    assert [p.arch for p in report.placeholders] == ["sm_120"]


def test_the_build_says_so_when_its_kernels_only_trap() -> None:
    """The build's closing notes repeat what verify will say (fixture objects built by nvcc)."""
    def notes(obj: str, arch: str) -> list[str]:
        artifact = BuiltArtifact(path=V / obj, kind="module", name="_k")
        request = SimpleNamespace(arch=parse_arch_spec(arch))
        return _placeholder_notes([artifact], request)  # type: ignore[arg-type]

    only = notes("placeholders_only.o", "sm_120")
    assert len(only) == 1 and only[0].startswith("every kernel compiled for sm_120 only traps")
    assert only[0].endswith("`flashbuild verify` fails on it")
    some = notes("placeholders.o", "sm_120")
    assert len(some) == 1 and some[0].startswith("3 of 4 kernels compiled for sm_120")
    assert "arch_gated" in some[0] and "checked" not in some[0]
    assert some[0].endswith("in 0 of 1 compiled units every kernel traps; `flashbuild verify` "
                            "warns on it")
    most = notes("placeholders_units.o", "sm_120")
    assert len(most) == 1 and most[0].endswith(
        "in 2 of 3 compiled units every kernel traps; `flashbuild verify` fails on it")
    assert notes("placeholders_units.o", "sm_90a") == []
    hopper = notes("placeholders.o", "sm_90a")  # the arch-gated kernel is real there
    assert len(hopper) == 1 and hopper[0].startswith("2 of 4 kernels compiled for sm_90a")
    assert "arch_gated" not in hopper[0] and "trap_only" in hopper[0]
    assert hopper[0].endswith("`flashbuild verify` warns on it")
