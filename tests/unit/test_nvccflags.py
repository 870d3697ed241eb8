"""nvcc's arch options read one way everywhere (source/nvccflags.py)."""

from __future__ import annotations

import pytest

from flashbuild.source import nvccflags
from flashbuild.source.treemodel import ninja_arch_flags


@pytest.mark.parametrize("token", ["-gencode", "--generate-code=arch=compute_90a,code=sm_90a",
                                   "-arch=sm_120a", "-arch", "--gpu-architecture=native",
                                   "-code=sm_90", "--gpu-code"])
def test_every_spelling_of_an_arch_option_is_one(token: str) -> None:
    assert nvccflags.is_arch_option(token)


@pytest.mark.parametrize("token", ["-arch-ls", "-code-ls", "-archive", "-O3", "--use_fast_math",
                                   "-DARCH=90", "-gencodex"])
def test_options_that_only_start_alike_are_not(token: str) -> None:
    assert not nvccflags.is_arch_option(token)


def test_an_option_keeps_the_value_given_as_the_next_argument() -> None:
    other, arch = nvccflags.split_arch_flags(
        ["-O3", "-gencode", "arch=compute_90a,code=sm_90a", "-arch", "sm_100f", "-lineinfo",
         "--generate-code=arch=compute_120,code=[sm_120]"])
    assert other == ["-O3", "-lineinfo"]
    assert arch == ["-gencode", "arch=compute_90a,code=sm_90a", "-arch", "sm_100f",
                    "--generate-code=arch=compute_120,code=[sm_120]"]


def test_the_ninja_reader_keeps_a_separate_gencode_value() -> None:
    ninja = ("build k.cu.o: CUDA_COMPILER__k_Release /src/k.cu || cmake_object_order\n"
             "  FLAGS = -O3 -gencode arch=compute_90a,code=sm_90a -Xcompiler=-fPIC\n")
    assert ninja_arch_flags(ninja) == {"/src/k.cu": ("-gencode", "arch=compute_90a,code=sm_90a")}


def test_read_arch_flags_sees_both_forms_and_the_shorthand() -> None:
    flags = nvccflags.read_arch_flags(
        ["nvcc -gencode arch=compute_90a,code=sm_90a -arch=sm_89 -c k.cu"])
    assert flags.sass == {"sm_90a", "sm_89"}
    assert flags.ptx == {"compute_89"}
    assert nvccflags.read_arch_flags(["-O2 -c k.cu"]).found is False


def test_pinned_arch_text() -> None:
    assert nvccflags.pins_arch("arch=compute_80,code=sm_80")
    assert nvccflags.pins_arch("-arch=sm_90")
    assert not nvccflags.pins_arch("TORCH_CUDA_ARCH_LIST")
    assert nvccflags.arch_text("nvcc -arch=sm_90a x.cu for compute_100f") == \
        ["-arch=sm_90a", "compute_100f"]
    line = "x" * 300 + " -gencode=arch=compute_90a,code=sm_90a"
    assert nvccflags.first_arch_option(line) == 301
