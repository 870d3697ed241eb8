"""Kernel resources from the cubin agree with ptxas -v; limits per arch."""

from __future__ import annotations

from pathlib import Path

from flashbuild.arch import parse_arch
from flashbuild.verifying.fatbin import list_images
from flashbuild.verifying.resources import (
    KernelResources,
    check_limits,
    image_resources,
    parse_ptxas_info,
)

V = Path(__file__).resolve().parent.parent / "fixtures" / "verify"


def test_cubin_matches_ptxas_report() -> None:
    (image,) = list_images(V / "resources_sm120.o").sass
    cubin = {k.name: k for k in image_resources(image)}
    ptxas = {k.name: k for k in parse_ptxas_info((V / "resources_sm120.ptxas.txt").read_text())}
    assert set(cubin) == set(ptxas) == {"_Z5stagePfi", "_Z6scale2Pf"}
    for name, want in ptxas.items():
        assert (cubin[name].registers, cubin[name].static_smem, cubin[name].stack) == (
            want.registers, want.static_smem, want.stack)
    assert cubin["_Z5stagePfi"].static_smem == 16384
    assert cubin["_Z5stagePfi"].max_threads == 128  # __launch_bounds__(128)


def test_compressed_cubin_is_read() -> None:
    (image,) = list_images(V / "compressed_sm90.o").sass
    stage = next(k for k in image_resources(image) if k.name == "_Z5stagePfi")
    assert stage.static_smem == 16384 and stage.registers


def test_160kb_dynamic_smem_fails_on_sm120_not_on_sm90() -> None:
    kernel = KernelResources(name="_Z5stagePfi", arch="sm_120", registers=56, static_smem=16384)
    dynamic = {"stage": 160 * 1024}
    problems = check_limits([kernel], parse_arch("sm_120").arch, dynamic_smem=dynamic)
    assert [p.severity for p in problems] == ["fail"]
    assert "101376" in problems[0].what
    assert check_limits([kernel], parse_arch("sm_90").arch, dynamic_smem=dynamic) == []


def test_register_file_and_spills() -> None:
    k = KernelResources(name="k", arch="sm_90", registers=255, max_threads=1024,
                        spill_stores=64, spill_loads=64)
    severities = sorted(p.severity for p in check_limits([k], parse_arch("sm_90").arch))
    assert severities == ["fail", "warn"]


def test_ptxas_spills_parsed() -> None:
    text = ("ptxas info    : Compiling entry function '_Z1kv' for 'sm_90a'\n"
            "ptxas info    : Function properties for _Z1kv\n"
            "    8 bytes stack frame, 12 bytes spill stores, 16 bytes spill loads\n"
            "ptxas info    : Used 255 registers, used 1 barriers, 2048 bytes smem\n")
    (k,) = parse_ptxas_info(text)
    assert (k.arch, k.registers, k.static_smem, k.stack, k.spill_stores, k.spill_loads) == (
        "sm_90a", 255, 2048, 8, 12, 16)
