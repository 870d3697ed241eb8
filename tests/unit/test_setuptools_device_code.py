"""The setuptools backend's device-code check, on the build hook's report as it writes it:
a CUDAExtension with no .cu source is an error only when no extension of the build has one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flashbuild.building.backends.setuptools import _check_device_code
from flashbuild.errors import BuildError


def _report(tmp_path: Path, *records: dict[str, object]) -> Path:
    path = tmp_path / "hook.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_a_host_only_cuda_extension_beside_one_with_kernels_is_a_note(tmp_path: Path) -> None:
    # torch_cluster's shape: `_version_cuda` is C++ that calls the CUDA runtime; the kernels
    # are in `_sampler_cuda`'s .cu files.
    report = _report(
        tmp_path,
        {"extension": "pkg._sampler_cuda", "removed": [], "added": ["-gencode"]},
        {"extension": "pkg._version_cuda", "no_device_code": True,
         "sources": ["csrc/version.cpp"]})
    note = _check_device_code(report, tmp_path / "build.log")
    assert note is not None
    assert note.startswith("`pkg._version_cuda`: CUDA extension(s) with host code only")
    assert "`pkg._sampler_cuda`" in note


def test_no_extension_with_device_code_is_an_error(tmp_path: Path) -> None:
    report = _report(tmp_path, {"extension": "pkg._C", "no_device_code": True,
                                "sources": ["csrc/host.cpp"]})
    with pytest.raises(BuildError) as err:
        _check_device_code(report, tmp_path / "build.log")
    assert "compiled no device code" in str(err.value)
    assert "csrc/host.cpp" in err.value.evidence


def test_a_report_without_host_only_extensions_says_nothing(tmp_path: Path) -> None:
    report = _report(tmp_path, {"extension": "pkg._C", "removed": [], "added": []})
    assert _check_device_code(report, tmp_path / "build.log") is None
