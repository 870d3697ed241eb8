"""Which exceptions of a tree's setup.py say it could not read the arch list's spelling: a
piece only a suffixed or `+PTX` spelling has (recipe init then records with `9.0`)."""

from __future__ import annotations

import pytest

from flashbuild.arch import parse_arch_spec
from flashbuild.scanning.draft import arch_spelling_refused
from flashbuild.source.setup_record import RaisedError


def _raised(message: str) -> RaisedError:
    return RaisedError(type="ValueError", message=message, where="setup.py:3")


@pytest.mark.parametrize(("arch", "message", "refused"), [
    # deepspeed 0.19.8's op builders: int() on the minor part of `9.0a`.
    ("sm_90a", "invalid literal for int() with base 10: '0a'", True),
    ("sm_120f", "unsupported compute capability 12.0f", True),
    ("sm_90+PTX", "invalid literal for int() with base 10: '0+PTX'", True),
    ("sm_100a", "arch 100a is not in the list", True),
    # Nothing in the message comes from a suffix: the spelling was not what it refused.
    ("sm_90", "invalid literal for int() with base 10: '0'", False),
    ("sm_120", "unsupported arch 12.0: this project builds for 8.0-9.0 only", False),
    ("sm_90a", "No module named 'dskernels'", False),
    # A piece inside a longer word or number is not the spelling.
    ("sm_90a", "sm_90a kernels need CUDA 12", False),
    ("sm_90a", "address 0x10a0a", False),
])
def test_a_suffix_quoted_by_the_exception_is_a_refused_spelling(
        arch: str, message: str, refused: bool) -> None:
    assert arch_spelling_refused(_raised(message), parse_arch_spec(arch)) is refused


def test_no_exception_is_no_refusal() -> None:
    assert not arch_spelling_refused(None, parse_arch_spec("sm_90a"))
