"""The Python checks on single files: FB182 (a hard-coded `.so`) and where it must stay quiet."""

from __future__ import annotations

import pytest

from flashbuild.scanning.checks_python import check_python
from flashbuild.scanning.findings import FileText, make_target


def _rules(text: str, platform: str = "windows") -> list[str]:
    report = check_python(FileText("pkg/_backend.py", "python", text),
                          make_target(platform, "sm120"))
    return [f"{f.rule}:{f.line}" for f in report.findings]


def test_so_alone_is_reported_for_windows() -> None:
    assert _rules('import os\nok = os.path.exists(f"{d}/{name}.so")\n') == ["FB182:2"]


@pytest.mark.parametrize("text", [
    # gsplat 1.5.3's JIT backend: a Windows build leaves `name.lib` beside its `.pyd`.
    'import os\nif os.path.exists(f"{name}.so") or os.path.exists(\n'
    '    f"{name}.lib"):\n    x = 1\n',
    'SUFFIXES = (".so", ".pyd")\n',
    'LIB = {"linux": "libfoo.so", "win32": "foo.dll"}\n',
    'suffix = ".pyd" if IS_WINDOWS else ".so"\n',
])
def test_so_beside_a_windows_suffix_is_not_reported(text: str) -> None:
    assert _rules(text) == []


def test_pairing_is_per_statement() -> None:
    # The `.dll` of another statement does not excuse this one.
    assert _rules('A = ".dll"\nB = f"{n}.so"\n') == ["FB182:2"]


def test_linux_target_never_reports_so() -> None:
    assert _rules('x = f"{n}.so"\n', platform="linux") == []
