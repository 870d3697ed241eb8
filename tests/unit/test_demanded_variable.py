"""A setup.py that raises because a variable of its own is unset: the draft's TODO names the
variable and the [[build.env]] line that sets it (torch-memory-saver 0.0.10's setup.py:160,
"TMS_CUDA_MAJOR env var must be set for CUDA builds"); before, it spoke of switches in
general."""

from __future__ import annotations

import pytest

from flashbuild.scanning.draft_check import _demanded_variable_fix


@pytest.mark.parametrize(("exception", "name"), [
    ("RuntimeError: TMS_CUDA_MAJOR env var must be set for CUDA builds (use `make "
     "build-wheel-multi-cuda` or scripts/build_multi_cuda.sh).", "TMS_CUDA_MAJOR"),
    ("EnvironmentError: MY_PROJECT_ROOT environment variable is not set", "MY_PROJECT_ROOT"),
    ("AssertionError: 'CUTLASS_DIR' is required", "CUTLASS_DIR"),
])
def test_the_variable_the_exception_asks_for_is_named(exception: str, name: str) -> None:
    fix = _demanded_variable_fix(exception)
    assert f"asks for {name} in the environment" in fix
    assert f'`set = {{ {name} = "…" }}`' in fix


@pytest.mark.parametrize("exception", [
    "ValueError: invalid literal for int() with base 10: '0a'",
    "RuntimeError: CUDA is not available",  # a word, not a variable
    "KeyError: 'version'",
])
def test_an_exception_that_names_no_variable_gets_nothing(exception: str) -> None:
    assert _demanded_variable_fix(exception) == ""
