"""Issue 22: a garbage or UTF-16 torch/version.py was an internal error in `build` (and said
"torch is not installed" when it was empty); now one paragraph with the fix, exit 3."""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest

from flashbuild.building.backends import setuptools
from flashbuild.detect.pyenv import parse_torch_version_file
from flashbuild.errors import ToolchainError

if TYPE_CHECKING:
    from pathlib import Path


class _FindSpec:
    """Answers the `find_spec('torch')` subprocess with the given origin."""

    def __init__(self, origin: Path) -> None:
        self.origin = origin

    def run(self, argv: list[str], **kw: Any) -> SimpleNamespace:
        return SimpleNamespace(ok=True, stdout=f"{self.origin}\n")


VERSION = '__version__ = "2.9.0+cu130"\ncuda = "13.0"\n'


@pytest.mark.parametrize(("name", "data"), [
    ("garbage", b"\xff\xfe\x00garbage\x80\x81"),
    ("UTF-16", VERSION.encode("utf-16")),
    ("not Python", b"__version__ = (\n"),
    ("nested too deeply", b"x = " + b"-" * 5000 + b"1\n"),
])
def test_an_unreadable_torch_version_file_is_one_paragraph(tmp_path: Path, name: str,
                                                           data: bytes) -> None:
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("")
    (tmp_path / "torch" / "version.py").write_bytes(data)
    request = SimpleNamespace(python="python", env={})
    with pytest.raises(ToolchainError) as err:
        setuptools.probe_torch(request,  # type: ignore[arg-type]
                               _FindSpec(tmp_path / "torch" / "__init__.py"))  # type: ignore[arg-type]
    where = tmp_path / "torch" / "version.py"
    assert err.value.what == f"torch's version file {where} cannot be read"
    assert "--force-reinstall torch" in err.value.fix and err.value.exit_code == 3


def test_a_good_version_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "version.py").write_text(VERSION)
    torch = setuptools.probe_torch(SimpleNamespace(python="python", env={}),  # type: ignore[arg-type]
                                   _FindSpec(tmp_path / "torch" / "__init__.py"))  # type: ignore[arg-type]
    assert torch == {"version": "2.9.0+cu130", "cuda": "13.0"}


def test_the_doctor_reader_says_too_deep_as_a_value_error() -> None:
    with pytest.raises(ValueError, match="nested too deeply"):
        parse_torch_version_file("x = " + "-" * 5000 + "1\n")
