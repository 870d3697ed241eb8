"""`flashbuild ci init`'s Linux legs in the PyPA manylinux_2_28 image (issue 31, item 7): the
image pinned by tag and digest, its policy carried to the repair and verify steps, the runner
itself with `--linux-image none`, and the CUDA releases whose nvcc rejects the image's GCC
refused before anything is written."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest

from flashbuild.ci import workflow
from flashbuild.errors import UsageError
from tests.unit.test_ci_init import _init, _tree, matrix

if TYPE_CHECKING:
    from pathlib import Path


def test_linux_legs_build_in_the_pinned_manylinux_image(tmp_path: Path) -> None:
    text = _init(_tree(tmp_path), cuda="12.9,13.0").read_text(encoding="utf-8")
    entries = matrix(text)
    image = workflow.LINUX_IMAGES["manylinux_2_28"]
    # Tag and digest: the tag for people, the digest so every run gets the same image.
    assert re.fullmatch(r"quay\.io/pypa/manylinux_2_28_x86_64:\d{4}\.\d\d\.\d\d-\d+"
                        r"@sha256:[0-9a-f]{64}", image.reference)
    for e in entries:
        linux = e["platform"] == "linux"
        assert e["image"] == (image.reference if linux else "")
        assert e["policy"] == ("manylinux_2_28" if linux else "")
    assert "    container:\n      image: ${{ matrix.image }}\n" in text
    assert "FLASHBUILD_POLICY: ${{ matrix.policy }}" in text
    assert "path: build/flashbuild-ci/wheelhouse/*.whl" in text


def test_linux_image_none_builds_on_the_runner(tmp_path: Path) -> None:
    text = _init(_tree(tmp_path), platform="linux", cuda="13.0",
                 linux_image="none").read_text(encoding="utf-8")
    assert {(e["image"], e["policy"]) for e in matrix(text)} == {("", "")}
    assert "--linux-image none" in text.splitlines()[6]


@pytest.mark.parametrize("cuda", ["12.6"])
def test_a_cuda_whose_nvcc_rejects_the_images_gcc_is_refused(tmp_path: Path,
                                                             cuda: str) -> None:
    tree = _tree(tmp_path)
    with pytest.raises(UsageError, match=f"CUDA {cuda} cannot build in the manylinux_2_28 "
                       "image") as info:
        _init(tree, platform="linux", cuda=cuda, arch="90")
    assert "GCC 14" in info.value.evidence and "--linux-image none" in info.value.fix
    assert not (tree / ".github").exists()
    # On the runner itself (ubuntu-24.04's installer from 12.5) it is allowed.
    text = _init(tree, platform="linux", cuda=cuda, arch="90", linux_image="none")
    assert matrix(text.read_text(encoding="utf-8"))[0]["toolkit"] == "installer"


def test_an_unknown_image_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not an image flashbuild ci knows"):
        _init(_tree(tmp_path), linux_image="manylinux_2_99")
