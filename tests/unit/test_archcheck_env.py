"""nvcc's environment in the build's arch proof (archcheck.py), on recorded values: the arch
flags of NVCC_APPEND_FLAGS / NVCC_PREPEND_FLAGS read and named with their origin, and a recipe's
NVCC_CCBIN checked against the host compiler flashbuild judged. The real builds are in
tests/integration/test_build_arch_var.py and tests/reliability/test_build_false_passes.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashbuild.building import archcheck
from flashbuild.errors import BuildError


def test_arch_flags_from_nvccs_environment_are_read_and_named() -> None:
    env = {"NVCC_APPEND_FLAGS": "-gencode arch=compute_80,code=sm_80 -lineinfo",
           "NVCC_PREPEND_FLAGS": "-O3"}
    flags = archcheck.environment_flags(env, {"NVCC_APPEND_FLAGS": env["NVCC_APPEND_FLAGS"]})
    assert flags.sass == {"sm_80"}
    assert flags.lines == ["NVCC_APPEND_FLAGS=-gencode arch=compute_80,code=sm_80 -lineinfo "
                           "(from the recipe's [[build.env]])"]
    user = archcheck.environment_flags({"NVCC_PREPEND_FLAGS": "-arch=native"}, {})
    assert user.wide == {"native"} and "(from your environment)" in user.lines[0]


def _ccbin(env: dict[str, str], recipe: dict[str, str], chosen: str, tmp: Path) -> None:
    archcheck.check_host_compiler(env, recipe, chosen=chosen,
                                  which=lambda name: str(tmp / name) if "/" not in name
                                  else name, user_value=None if recipe else env.get(
                                      "NVCC_CCBIN"))


def test_a_recipe_ccbin_other_than_the_checked_compiler_is_refused(tmp_path: Path) -> None:
    (tmp_path / "g++").write_text("")
    (tmp_path / "g++-9").write_text("")
    chosen = str(tmp_path / "g++")
    _ccbin({"NVCC_CCBIN": "g++"}, {"NVCC_CCBIN": "g++"}, chosen, tmp_path)  # the same: fine
    _ccbin({"NVCC_CCBIN": "g++-9"}, {}, chosen, tmp_path)  # the user's: doctor probed it
    with pytest.raises(BuildError) as err:
        _ccbin({"NVCC_CCBIN": "g++-9"}, {"NVCC_CCBIN": "g++-9"}, chosen, tmp_path)
    assert "from the recipe's [[build.env]]" in err.value.evidence
    with pytest.raises(BuildError) as err:  # MSVC: flashbuild activates the toolset itself
        _ccbin({"NVCC_CCBIN": "cl.exe"}, {}, "", tmp_path)
    assert "unset NVCC_CCBIN" in err.value.fix
