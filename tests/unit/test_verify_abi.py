"""verify's manylinux check: symbol versions against a policy (issue 31 item 6)."""

from __future__ import annotations

import pytest

from flashbuild.errors import UsageError
from flashbuild.verifying.abi import platform_tag_warning, policy_named


def test_policy_names_and_tags() -> None:
    assert policy_named("manylinux2014").name == "manylinux_2_17"
    assert policy_named("manylinux_2_28_x86_64").name == "manylinux_2_28"
    with pytest.raises(UsageError, match="unknown manylinux policy"):
        policy_named("manylinux_9_99")


def test_linux_tag_is_a_warning() -> None:
    warning = platform_tag_warning("linux_x86_64")
    assert warning is not None and "PyPI" in warning
    assert platform_tag_warning("manylinux_2_28_x86_64") is None
