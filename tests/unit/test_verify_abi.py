"""verify's manylinux check: symbol versions against a policy (issue 31 item 6)."""

from __future__ import annotations

import pytest

from flashbuild.errors import UsageError
from flashbuild.verifying.abi import platform_tag_warning, policy_named
from flashbuild.verifying.inputs import Subject
from flashbuild.verifying.verify import Status, _abi_checks


def test_policy_names_and_tags() -> None:
    assert policy_named("manylinux2014").name == "manylinux_2_17"
    assert policy_named("manylinux_2_28_x86_64").name == "manylinux_2_28"
    with pytest.raises(UsageError, match="unknown manylinux policy"):
        policy_named("manylinux_9_99")


def test_linux_tag_is_a_warning() -> None:
    warning = platform_tag_warning("linux_x86_64")
    assert warning is not None and "PyPI" in warning
    assert platform_tag_warning("manylinux_2_28_x86_64") is None


def test_linux_wheel_warns_and_manylinux_tag_is_the_policy() -> None:
    linux = Subject(kind="wheel", label="/w/pkg-1.0-cp311-cp311-linux_x86_64.whl", binaries=())
    checks = _abi_checks(linux, None)
    assert [(c.area, c.status) for c in checks] == [("abi", Status.WARN)]
    tagged = Subject(kind="wheel", label="/w/pkg-1.0-cp311-cp311-manylinux_2_28_x86_64.whl",
                     binaries=())
    assert _abi_checks(tagged, None) == []
    with pytest.raises(UsageError):
        _abi_checks(tagged, "manylinux_1_0")
