from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashbuild.arch import FIRST_CUDA, Arch, Image, Suffix, parse_arch, parse_arch_spec
from flashbuild.errors import UsageError


@pytest.mark.parametrize("text", ["sm120", "sm_120", "SM120", "12.0", "120", "sm_120-real"])
def test_every_spelling_of_sm120_is_the_same_target(text: str) -> None:
    target = parse_arch(text)
    assert target.arch == Arch(12, 0)
    assert target.image is Image.SASS


def test_suffixes_and_images() -> None:
    assert parse_arch("sm_120a").arch.suffix is Suffix.ARCH
    assert parse_arch("120f").arch.suffix is Suffix.FAMILY
    assert parse_arch("compute_120").image is Image.PTX
    assert parse_arch("120-virtual").image is Image.PTX
    assert parse_arch("8.6+PTX").image is Image.BOTH


def test_list_renders_for_every_layer() -> None:
    spec = parse_arch_spec("120; sm_90a")
    assert spec.archs == (Arch(9, 0, Suffix.ARCH), Arch(12, 0))
    assert spec.cmake() == "90a-real;120-real"
    assert spec.gencode() == ["-gencode", "arch=compute_90a,code=sm_90a",
                              "-gencode", "arch=compute_120,code=sm_120"]
    assert spec.torch() == "9.0a;12.0"


def test_sass_and_ptx_of_one_arch_merge() -> None:
    spec = parse_arch_spec("sm_120,compute_120")
    assert spec.cmake() == "120"
    assert spec.gencode() == ["-gencode", "arch=compute_120,code=[sm_120,compute_120]"]
    assert spec.torch() == "12.0+PTX"


def test_native_resolves_to_the_gpus_found() -> None:
    spec = parse_arch_spec("native")
    assert spec.native and spec.cmake() == "native"
    assert spec.resolve_native([(9, 0), (12, 0)]).cmake() == "90-real;120-real"
    with pytest.raises(UsageError, match="needs a GPU"):
        spec.resolve_native([])


def test_torch_cannot_express_family_targets() -> None:
    with pytest.raises(UsageError, match="family"):
        parse_arch_spec("120f").torch()


@pytest.mark.parametrize("text,why", [
    ("banana", "not a GPU architecture spelling"),
    ("sm_999", "no NVIDIA GPU"),
    ("sm_125", "no NVIDIA GPU"),
    ("sm_80a", "from sm_90a on"),
    ("sm_90f", "from sm_100f on"),
    ("", "empty"),
])
def test_bad_spellings_are_usage_errors_with_a_fix(text: str, why: str) -> None:
    with pytest.raises(UsageError, match=why) as info:
        parse_arch_spec(text)
    assert info.value.exit_code == 2
    assert "sm_120" in info.value.fix


def test_facts() -> None:
    assert str(Arch(12, 0).first_cuda()) == "12.8"
    assert str(Arch(12, 0, Suffix.FAMILY).first_cuda()) == "12.9"
    assert str(Arch(7, 0).removed_in()) == "13.0"
    assert Arch(12, 0).max_smem_per_block() == 101376
    assert Arch(9, 0).max_smem_per_block() == 232448
    assert Arch(9, 0, Suffix.ARCH).runs_on((9, 0))
    assert not Arch(9, 0, Suffix.ARCH).runs_on((10, 0))
    assert Arch(8, 6).runs_on((8, 9))
    assert not Arch(9, 0).runs_on((12, 0))


@given(st.sampled_from(sorted(FIRST_CUDA)), st.sampled_from(["", "a", "f"]),
       st.sampled_from(["sm_{c}{s}", "sm{c}{s}", "{c}{s}", "{M}.{m}{s}", "SM_{c}{s}"]))
def test_every_spelling_round_trips_through_cmake(code: int, suffix: str, form: str) -> None:
    if (suffix == "a" and code < 90) or (suffix == "f" and code < 100):
        return
    text = form.format(c=code, s=suffix, M=code // 10, m=code % 10)
    spec = parse_arch_spec(text)
    assert parse_arch_spec(spec.cmake()) == spec
