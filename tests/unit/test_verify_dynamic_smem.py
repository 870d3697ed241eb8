"""Dynamic shared memory declared per arch in the binary (`[verify] dynamic_smem`): read from
each cubin's `.nv.global.init` and checked against the arch's per-block limit, no GPU needed.

Fixture: tests/fixtures/verify/dynsmem.o (dynsmem.cu, make_fixtures.sh): sm_90a + sm_120 SASS;
`fb_dynamic_smem_stage` is 200 KB on sm_90a and the generic 160 KB on sm_120,
`fb_dynamic_smem_small` 48 KB on both; kernel `stage` has 4096 B of static shared memory.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from flashbuild.arch import parse_arch, parse_arch_spec
from flashbuild.errors import RecipeError
from flashbuild.installing.manifest import (
    Artifact,
    DynamicSmemSymbol,
    HostCompiler,
    Manifest,
    Toolkit,
)
from flashbuild.platforms import get
from flashbuild.recipes.load import parse_recipe
from flashbuild.verifying.fatbin import BinaryFormatError, list_images
from flashbuild.verifying.resources import (
    DeclaredSmem,
    check_declared_smem,
    declared_dynamic_smem,
    image_declared_smem,
    image_resources,
)
from flashbuild.verifying.verify import Status, VerifyReport, verify_install
from tests.fakes import ReplayRunner

V = Path(__file__).resolve().parent.parent / "fixtures" / "verify"
SYMBOLS = {"stage": "fb_dynamic_smem_stage", "small": "fb_dynamic_smem_small"}


def images() -> dict[str, bytes]:
    return {i.name: i.data() for i in list_images(V / "dynsmem.o").sass}


def test_values_are_read_per_arch_from_nv_global_init() -> None:
    cubins = images()
    assert set(cubins) == {"sm_90a", "sm_120"}
    got = {arch: {d.kernel: (d.bytes, d.section) for d in declared_dynamic_smem(
        data, SYMBOLS, arch=arch)} for arch, data in cubins.items()}
    assert got == {
        "sm_90a": {"stage": (200 * 1024, ".nv.global.init"),
                   "small": (48 * 1024, ".nv.global.init")},
        "sm_120": {"stage": (160 * 1024, ".nv.global.init"),
                   "small": (48 * 1024, ".nv.global.init")},
    }


def test_a_symbol_the_cubin_lacks_is_left_out() -> None:
    (image,) = list_images(V / "sass_sm90a.o").sass
    assert image_declared_smem(image, SYMBOLS) == ()
    assert declared_dynamic_smem(images()["sm_120"], {"x": "fb_nope"}, arch="sm_120") == ()


def test_over_the_limit_fails_with_static_included() -> None:
    sm120 = next(i for i in list_images(V / "dynsmem.o").sass if i.name == "sm_120")
    kernels = image_resources(sm120)
    stage = next(d for d in image_declared_smem(sm120, SYMBOLS) if d.kernel == "stage")
    problem = check_declared_smem(stage, parse_arch("sm_120").arch, kernels=kernels)
    assert problem is not None and problem.severity == "fail"
    assert problem.what == (
        "stage requests 163840 B of dynamic shared memory per block on sm_120 "
        "(+ 4096 B static = 167936 B); sm_120 allows 101376 B, so the launch is refused at "
        "run time")
    assert "at most 97280 B" in problem.fix and "insert-block" in problem.fix
    assert "fb_dynamic_smem_stage" in problem.evidence


@pytest.mark.parametrize(("arch", "amount"), [("sm_90a", 200 * 1024), ("sm_120", 96 * 1024)])
def test_within_the_limit_passes(arch: str, amount: int) -> None:
    declared = DeclaredSmem(kernel="stage", symbol="s", arch=arch, bytes=amount,
                            section=".nv.global.init")
    assert check_declared_smem(declared, parse_arch(arch).arch) is None


def test_static_smem_tips_a_request_over() -> None:
    limit = 101376
    declared = DeclaredSmem(kernel="stage", symbol="s", arch="sm_120", bytes=limit,
                            section=".nv.global.init")
    sm120 = next(i for i in list_images(V / "dynsmem.o").sass if i.name == "sm_120")
    assert check_declared_smem(declared, parse_arch("sm_120").arch) is None
    assert check_declared_smem(declared, parse_arch("sm_120").arch,
                               kernels=image_resources(sm120)) is not None


def test_damaged_cubin_is_a_format_error() -> None:
    with pytest.raises(BinaryFormatError):
        declared_dynamic_smem(images()["sm_120"][:200], SYMBOLS, arch="sm_120")


# --- through verify_install -----------------------------------------------------------------


def install(tmp_path: Path, symbols: dict[str, str], archs: str = "90a-real;120-real") -> Path:
    pkg = tmp_path / "site" / "flashkern"
    pkg.mkdir(parents=True)
    shutil.copy(V / "dynsmem.o", pkg / "dynsmem.o")
    Manifest(flashbuild="0.1.0", recipe="csrc", platform="linux", archs=archs,
             toolkit=Toolkit(root="/cuda", version="13.0"),
             host_compiler=HostCompiler(kind="gcc", version="12", path="/usr/bin/g++"),
             artifacts=(Artifact(path="dynsmem.o", kind="module"),),
             dynamic_smem_symbols=tuple(DynamicSmemSymbol(kernel=k, symbol=s)
                                        for k, s in symbols.items())).write(pkg)
    return pkg


def verify(pkg: Path, arch: str | None = None, *, strict: bool = True) -> VerifyReport:
    runner = ReplayRunner()
    runner.add("ldconfig", "-p", out=(V / "ldconfig-p.txt").read_text())
    return verify_install(manifest_path=pkg, targets=parse_arch_spec(arch) if arch else None,
                          runner=runner, platform=get("linux"), env={"PATH": "/usr/bin"},
                          import_module=False, run_gpu=False, strict_arch=strict)


def test_verify_fails_only_the_sm120_request(tmp_path: Path) -> None:
    report = verify(install(tmp_path, SYMBOLS))
    (fail,) = report.failures
    assert fail.area == "resources" and fail.subject == "dynsmem.o stage (sm_120)"
    assert "163840 B" in fail.summary and "101376 B" in fail.summary
    oks = {c.subject for c in report.checks
           if c.area == "resources" and c.status is Status.OK and "dynamic" in c.summary}
    assert oks == {"dynsmem.o stage (sm_90a)", "dynsmem.o small (sm_90a)",
                   "dynsmem.o small (sm_120)"}
    assert report.to_json()["ok"] is False


def test_verify_for_sm90a_only_passes(tmp_path: Path) -> None:
    # The module also holds sm_120 (the build's other arch): not judged without strictness.
    report = verify(install(tmp_path, SYMBOLS), arch="sm_90a", strict=False)
    assert report.ok, report.failures


def test_verify_warns_when_no_cubin_defines_the_symbol(tmp_path: Path) -> None:
    report = verify(install(tmp_path, {"stage": "fb_dynamic_smem_typo"}), arch="90a;120")
    assert report.ok
    warns = [c for c in report.warnings if c.area == "resources"]
    assert [c.subject for c in warns] == ["flashkern stage (sm_90a)", "flashkern stage (sm_120)"]
    assert "fb_dynamic_smem_typo" in warns[0].summary and "unchecked" in warns[0].summary


def test_manifest_round_trips_the_symbols(tmp_path: Path) -> None:
    pkg = install(tmp_path, SYMBOLS)
    assert Manifest.load(pkg).dynamic_smem_symbols == (
        DynamicSmemSymbol(kernel="stage", symbol="fb_dynamic_smem_stage"),
        DynamicSmemSymbol(kernel="small", symbol="fb_dynamic_smem_small"))


def test_recipe_field_is_typed_and_checked() -> None:
    head = '[recipe]\nname = "x"\n[verify]\n'
    recipe = parse_recipe(head + 'dynamic_smem = { k = "fk_dynamic_smem_k" }\n')
    assert recipe.verify.dynamic_smem == {"k": "fk_dynamic_smem_k"}
    with pytest.raises(RecipeError, match="not a C identifier"):
        parse_recipe(head + 'dynamic_smem = { k = "fk dyn" }\n')
    with pytest.raises(RecipeError, match=re.escape("`verify.dynamic_smem.k` must be a string")):
        parse_recipe(head + "dynamic_smem = { k = 3 }\n")
