"""A setup.py that raised: the fix names what its words ask for. A variable of its own
(torch-memory-saver 0.0.10's setup.py:160, "TMS_CUDA_MAJOR env var must be set for CUDA
builds"): the variable and the [[build.env]] line that sets it. A `git` command that needs a
checkout (torch-batch-svd's version from `git rev-parse --short HEAD`, in an archive): a
clone. Before, both spoke of switches or submodules in general."""

from __future__ import annotations

import pytest

from flashbuild.source.setup_record import demanded_variable_fix, exception_fix, git_checkout_fix


@pytest.mark.parametrize(("exception", "name"), [
    ("RuntimeError: TMS_CUDA_MAJOR env var must be set for CUDA builds (use `make "
     "build-wheel-multi-cuda` or scripts/build_multi_cuda.sh).", "TMS_CUDA_MAJOR"),
    ("EnvironmentError: MY_PROJECT_ROOT environment variable is not set", "MY_PROJECT_ROOT"),
    ("AssertionError: 'CUTLASS_DIR' is required", "CUTLASS_DIR"),
])
def test_the_variable_the_exception_asks_for_is_named(exception: str, name: str) -> None:
    fix = demanded_variable_fix(exception)
    assert fix is not None and exception_fix(exception) == fix
    assert f"asks for {name} in the environment" in fix
    assert f'`set = {{ {name} = "…" }}`' in fix


@pytest.mark.parametrize("exception", [
    "ValueError: invalid literal for int() with base 10: '0a'",
    "RuntimeError: CUDA is not available",  # a word, not a variable
    "KeyError: 'version'",
])
def test_an_exception_that_names_no_variable_gets_nothing(exception: str) -> None:
    assert demanded_variable_fix(exception) is None
    assert exception_fix(exception) is None


def test_a_git_command_outside_a_checkout_asks_for_a_clone() -> None:
    exception = ("CalledProcessError: Command '['git', 'rev-parse', '--short', 'HEAD']' "
                 "returned non-zero exit status 128. (setup.py:9)")
    fix = git_checkout_fix(exception)
    assert fix is not None and exception_fix(exception) == fix
    assert "`git rev-parse --short HEAD`" in fix and "git clone" in fix
    # Another status is the command's own failure, not a missing checkout.
    assert git_checkout_fix(exception.replace("128", "1")) is None
    assert git_checkout_fix("CalledProcessError: Command '['nvcc', '-V']' returned non-zero "
                            "exit status 128.") is None
