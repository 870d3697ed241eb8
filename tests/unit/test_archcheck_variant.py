"""`--arch sm_120` on a tree that compiles sm_120a itself (FlashRT, issue 28), on recorded
values: the arch check's fix is the `--arch` to type, never a variable; a recipe's `[build]
arch_suffix` turns the request into the variant once, with a note; and the variable the check
suggests is never a BOOL (FlashRT's FA2_ARCH_NATIVE_ONLY sorts before its GPU_ARCH). The real
configure of a tree of this class is tests/integration/test_build_arch_suffix.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashbuild.arch import Suffix, parse_arch_spec
from flashbuild.building import archcheck, cmake
from flashbuild.building.backends.cmake import arch_fix
from flashbuild.errors import BuildError
from flashbuild.pipeline.command import tree_arch
from flashbuild.recipes.load import load_recipe, parse_recipe
from flashbuild.source.nvccflags import read_arch_flags

#: FlashRT's build.ninja for GPU_ARCH=120 (FLAGS lines recorded from its configure here).
FLASHRT_120 = [
    "FLAGS = -Xptxas -v -O3 -DNDEBUG -Xcompiler=-fPIC --expt-relaxed-constexpr -O3 "
    "-gencode arch=compute_120a,code=sm_120a",
    "FLAGS = -O3 -Xcompiler -Wno-deprecated-declarations -t 4 "
    "-gencode arch=compute_120a,code=sm_120a",
]

#: The `ARCH` entries of FlashRT's CMakeCache.txt after that configure (recorded).
FLASHRT_CACHE = """\
CMAKE_CUDA_ARCHITECTURES:UNINITIALIZED=120-real
FA2_ARCH_NATIVE_ONLY:BOOL=ON
GPU_ARCH:UNINITIALIZED=120
"""


def _refusal(flags: list[str], arch: str) -> BuildError:
    with pytest.raises(BuildError) as err:
        archcheck.check(read_arch_flags(flags), parse_arch_spec(arch),
                        where=Path("build.ninja"), fix="the variable fix")
    return err.value


def test_a_tree_that_adds_the_a_itself_gets_the_arch_to_type() -> None:
    err = _refusal(FLASHRT_120, "sm120")
    assert err.exit_code == 6
    assert err.fix == "build with `--arch sm_120a`"
    assert "compiles sm_120a, not --arch sm_120" in err.what
    assert "sm_120a SASS runs only on compute capability 12.0 GPUs" in err.evidence
    assert 'arch_suffix = "a"' in err.evidence
    # Several targets, PTX kept: one word to type.
    both = _refusal(["-gencode arch=compute_90a,code=sm_90a",
                     "-gencode arch=compute_120a,code=[sm_120a,compute_120a]"], "90;120+PTX")
    assert both.fix == "build with `--arch sm_90a,sm_120a+PTX`"
    assert parse_arch_spec("sm_90a,sm_120a+PTX").argument == "sm_90a,sm_120a+PTX"
    family = _refusal(["-gencode arch=compute_120f,code=sm_120f"], "sm_120")
    assert family.fix == "build with `--arch sm_120f`"


@pytest.mark.parametrize("flags", [
    ["-gencode arch=compute_120a,code=sm_120a", "-gencode arch=compute_89,code=sm_89"],
    ["-gencode arch=compute_90a,code=sm_90a"],
    ["-gencode arch=compute_120a,code=sm_120a", "-arch=native"],
])
def test_any_other_difference_keeps_the_general_refusal(flags: list[str]) -> None:
    assert archcheck.variant_of_request(parse_arch_spec("sm_120"),
                                        read_arch_flags(flags)) is None
    assert _refusal(flags, "sm_120").fix == "the variable fix"


def test_a_bool_is_never_the_variable_to_hand_the_arch_to(tmp_path: Path) -> None:
    (tmp_path / "CMakeCache.txt").write_text(FLASHRT_CACHE)
    entries = cmake.cache_entries(tmp_path, contains="ARCH")
    assert [(e.name, e.type) for e in entries][1] == ("FA2_ARCH_NATIVE_ONLY", "BOOL")
    fix = arch_fix(entries)
    assert 'define = { GPU_ARCH = "{arch_numbers}" }' in fix
    assert "FA2_ARCH_NATIVE_ONLY" not in fix
    # Only switches (a BOOL, a STRING holding ON, a path): no name is made up for them.
    (tmp_path / "CMakeCache.txt").write_text(
        "FA2_ARCH_NATIVE_ONLY:BOOL=ON\nUSE_ARCH_HACKS:STRING=OFF\nARCH_TOOL:FILEPATH=/x/y\n")
    fix = arch_fix(cmake.cache_entries(tmp_path, contains="ARCH"))
    assert 'define = { NAME = "{arch_numbers}" }' in fix
    assert not any(n in fix for n in ("FA2_ARCH_NATIVE_ONLY", "USE_ARCH_HACKS", "ARCH_TOOL"))


def test_a_value_that_reads_as_an_arch_is_suggested_first(tmp_path: Path) -> None:
    (tmp_path / "CMakeCache.txt").write_text(
        "ARCH_LABEL:STRING=blackwell\nMY_CUDA_ARCHS:STRING=80;90\n")
    names = [e.name for e in cmake.arch_variables(cmake.cache_entries(tmp_path))]
    assert names == ["MY_CUDA_ARCHS", "ARCH_LABEL"]


def test_with_suffix_takes_only_targets_that_have_the_variant() -> None:
    spec = parse_arch_spec("sm_89;sm_90;120+PTX")
    assert spec.with_suffix(Suffix.ARCH).label == "sm_89, sm_90a, sm_120a+PTX"
    assert spec.with_suffix(Suffix.FAMILY).label == "sm_89, sm_90, sm_120f+PTX"
    assert parse_arch_spec("sm_120f").with_suffix(Suffix.ARCH).label == "sm_120f"


def test_the_flashrt_recipe_builds_sm_120_as_sm_120a_and_says_so() -> None:
    recipe = load_recipe("flashrt")
    assert recipe.build.arch_suffix == "a"
    spec, note = tree_arch(recipe, parse_arch_spec("sm120"))
    assert spec == parse_arch_spec("sm_120a")
    assert note.startswith("--arch sm_120 is built as sm_120a: the recipe `flashrt` says")
    assert "sm_120a SASS runs only on compute capability 12.0 GPUs" in note
    # Already the variant, or an arch without one: nothing changes, nothing is said.
    assert tree_arch(recipe, parse_arch_spec("sm_120a")) == (parse_arch_spec("sm_120a"), "")
    assert tree_arch(recipe, parse_arch_spec("sm_89")) == (parse_arch_spec("sm_89"), "")


def test_a_recipe_without_arch_suffix_leaves_the_arch_alone() -> None:
    recipe = parse_recipe('[recipe]\nname = "x"\n')
    assert recipe.build.arch_suffix is None
    assert tree_arch(recipe, parse_arch_spec("sm120")) == (parse_arch_spec("sm120"), "")
