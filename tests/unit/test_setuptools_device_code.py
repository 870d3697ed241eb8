"""The setuptools backend's device-code check, on the build hook's report as it writes it:
a CUDAExtension with no .cu source is an error only when no extension of the build has one
and the tree holds .cu files the build left out; a tree with no CUDA source at all
(torch-batch-svd: C++ that calls cuSOLVER) builds, with a note."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flashbuild.building.backends.setuptools import (
    _artifacts,
    _check_device_code,
    _device_extensions,
)
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
    note = _check_device_code(report, tmp_path / "build.log", tmp_path)
    assert note is not None
    assert note.startswith("`pkg._version_cuda`: CUDA extension(s) with host code only")
    assert "`pkg._sampler_cuda`" in note


def test_no_extension_with_device_code_in_a_tree_with_cu_files_is_an_error(
        tmp_path: Path) -> None:
    # A glob that matched nothing, a switch: the kernels the tree has were not compiled.
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "kernels.cu").write_text("__global__ void k() {}\n")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "old.cu").write_text("")  # an old build's copy is not the tree's
    report = _report(tmp_path, {"extension": "pkg._C", "no_device_code": True,
                                "sources": ["csrc/host.cpp"]})
    with pytest.raises(BuildError) as err:
        _check_device_code(report, tmp_path / "build.log", tmp_path)
    assert "compiled no device code" in str(err.value)
    assert "csrc/host.cpp" in err.value.evidence
    assert "not compiled: csrc/kernels.cu;" in err.value.evidence


def test_a_tree_without_any_cuda_source_builds_host_code_with_a_note(tmp_path: Path) -> None:
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "svd.cpp").write_text("int f() { return 0; }\n")
    report = _report(tmp_path, {"extension": "torch_batch_svd._c", "no_device_code": True,
                                "sources": ["csrc/svd.cpp"]})
    note = _check_device_code(report, tmp_path / "build.log", tmp_path)
    assert note is not None and "has no CUDA source (.cu) at all" in note
    # And verify then expects no GPU code in its module.
    device = _device_extensions(report, tmp_path)
    assert device == frozenset()
    module = tmp_path / "out" / "torch_batch_svd" / "_c.so"
    module.parent.mkdir(parents=True)
    module.write_bytes(b"")

    class _Recipe:
        artifact: tuple[object, ...] = ()

    class _Request:
        recipe = _Recipe()

    built = _artifacts(_Request(), [module], None, device)  # type: ignore[arg-type]
    assert [a.gpu_code for a in built] == [False]


def test_a_report_without_host_only_extensions_says_nothing(tmp_path: Path) -> None:
    report = _report(tmp_path, {"extension": "pkg._C", "removed": [], "added": []})
    assert _check_device_code(report, tmp_path / "build.log", tmp_path) is None


def test_a_submodule_not_checked_out_keeps_the_refusal(tmp_path: Path) -> None:
    # A review, 2026-11-29: the kernels may sit in a submodule that is not there; then the
    # tree's lack of .cu files proves nothing, and the build still stops.
    (tmp_path / ".gitmodules").write_text('[submodule "k"]\n\tpath = third_party/kernels\n'
                                          "\turl = https://example.invalid/k.git\n")
    (tmp_path / "third_party" / "kernels").mkdir(parents=True)
    report = _report(tmp_path, {"extension": "pkg._C", "no_device_code": True,
                                "sources": ["csrc/host.cpp"]})
    with pytest.raises(BuildError) as err:
        _check_device_code(report, tmp_path / "build.log", tmp_path)
    assert "submodules not checked out: third_party/kernels" in err.value.evidence


def test_setuptools_own_build_ext_in_a_tree_without_cu_files_is_host_code(
        tmp_path: Path) -> None:
    # torch-memory-saver's shape: plain `Extension`s of C++ that link cudart, built by
    # setuptools' own build_ext; the hook marks them `plain`. No .cu in the tree: a note,
    # and every module host code only.
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "core.cpp").write_text("int f() { return 0; }\n")
    report = _report(tmp_path, *({"extension": name, "plain": True, "no_device_code": True,
                                  "sources": ["csrc/core.cpp"]} for name in ("a_cu13", "b_cu13")))
    note = _check_device_code(report, tmp_path / "build.log", tmp_path)
    assert note is not None and note.startswith("`a_cu13`, `b_cu13`: host code only")
    assert _device_extensions(report, tmp_path) == frozenset()


def test_setuptools_own_build_ext_in_a_tree_with_cu_files_is_left_to_verify(
        tmp_path: Path) -> None:
    # A plain build_ext may compile .cu files a way of its own (a compiler taught `.cu`,
    # objects it links in): no error, and no module is taken for host code only.
    (tmp_path / "kernels.cu").write_text("__global__ void k() {}\n")
    report = _report(tmp_path, {"extension": "pkg._C", "plain": True, "no_device_code": True,
                                "sources": ["host.cpp"]})
    assert _check_device_code(report, tmp_path / "build.log", tmp_path) is None
    assert _device_extensions(report, tmp_path) is None
    with_cu = _report(tmp_path, {"extension": "pkg._C", "plain": True,
                                 "no_device_code": False, "sources": ["kernels.cu"]})
    assert _device_extensions(with_cu, tmp_path) is None


def test_setuptools_own_build_ext_never_refuses_the_build(tmp_path: Path) -> None:
    # No CUDAExtension was declared: a submodule not checked out (an unrelated docs theme,
    # perhaps) leaves the question to verify instead of stopping the build, and a build_ext
    # run twice names each extension once.
    (tmp_path / ".gitmodules").write_text('[submodule "t"]\n\tpath = docs/theme\n'
                                          "\turl = https://example.invalid/t.git\n")
    (tmp_path / "core.cpp").write_text("int f() { return 0; }\n")
    record = {"extension": "plain_a", "plain": True, "no_device_code": True,
              "sources": ["core.cpp"]}
    report = _report(tmp_path, record, record)
    assert _check_device_code(report, tmp_path / "build.log", tmp_path) is None
    assert _device_extensions(report, tmp_path) is None
    (tmp_path / ".gitmodules").unlink()
    note = _check_device_code(report, tmp_path / "build.log", tmp_path)
    assert note is not None and note.startswith("`plain_a`: host code only")
