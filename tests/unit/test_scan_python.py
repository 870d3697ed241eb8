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


@pytest.mark.parametrize("text", [
    # deepspeed's XPU op builder and gptqmodel's ROCm probe: another stack's runtime.
    "import os\nsycl = os.path.isfile(os.path.join(lib, 'libsycl.so'))\n",
    'ok = (candidate / "libamdhip64.so").is_file()\n',
    "import ctypes\nctypes.CDLL('/opt/rocm/lib/libhsa-runtime64.so.1')\n",
])
def test_another_stacks_library_is_not_a_windows_cuda_problem(text: str) -> None:
    assert _rules(text) == []


def test_a_backend_module_of_another_stack_is_not_checked_for_so() -> None:
    text = 'lib = f"{name}.so"\n'
    for path in ("ops/op_builder/xpu/builder.py", "pkg/rocm_utils.py", "pkg/npu/load.py"):
        report = check_python(FileText(path, "python", text), make_target("windows", "sm120"))
        assert report.findings == [], path
    # A CUDA module of the same tree still is.
    report = check_python(FileText("ops/op_builder/builder.py", "python", text),
                          make_target("windows", "sm120"))
    assert [f.rule for f in report.findings] == ["FB182"]
