"""The build hook's answers to a tree's own `torch.cuda` questions when this machine's GPU
cannot be opened (building/backends/resources/sitecustomize.py, `_present_gpu`).

Seen on an H200 machine (natten 0.21.7's setup.py:84,
`get_device_properties(current_device())`): in introspection's contained record run the driver
is there, `is_available()` says True, and `device_count()` raises "Unexpected error from
cudaGetDeviceCount() ... Error 304: OS call failed", which stopped the record. A GPU the
process cannot open is now no GPU: the target's capability is presented, as on a machine
without one. The hook is loaded under another name, so its start-up code does not run."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

HOOK = (Path(__file__).resolve().parents[2] / "flashbuild" / "building" / "backends" /
        "resources" / "sitecustomize.py")


def _hook(monkeypatch: pytest.MonkeyPatch, where: str | None) -> ModuleType:
    spec = importlib.util.spec_from_file_location("flashbuild_hook_under_test", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("FLASHBUILD_TARGET_CC", "9.0")
    monkeypatch.delenv("FLASHBUILD_HOOK_REPORT", raising=False)
    monkeypatch.setattr(module, "_caller_in_tree", lambda: where)
    return module


ERROR_304 = ("Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions "
             "before calling NumCudaDevices() that might have already set an error? Error 304: "
             "OS call failed or operation not supported on this OS")


def _cuda(*, available: bool, count: int | None) -> SimpleNamespace:
    """A stand-in torch.cuda whose device cannot be opened: `current_device()` raises Error
    304; `device_count()` raises too when `count` is None, else says `count` (NVML's)."""
    def raises(*_a: object) -> int:
        raise RuntimeError(ERROR_304)

    def properties(device: object = None) -> object:
        if count is None:
            raise AssertionError("the real properties of a GPU that cannot be opened were read")
        return raises()

    return SimpleNamespace(is_available=lambda: available,
                           device_count=raises if count is None else (lambda: count),
                           get_device_capability=lambda device=None: (9, 0),
                           current_device=raises, get_device_properties=properties)


def _unopenable_gpu() -> SimpleNamespace:
    return _cuda(available=True, count=None)


def test_a_gpu_the_record_run_cannot_open_is_answered_with_the_target(
        monkeypatch: pytest.MonkeyPatch) -> None:
    hook = _hook(monkeypatch, where="setup.py:84")
    cuda = _unopenable_gpu()
    hook._present_gpu(cuda)
    assert cuda.is_available() is True
    assert cuda.device_count() == 1
    props = cuda.get_device_properties(cuda.current_device())
    assert (props.major, props.minor) == (9, 0)
    assert "flashbuild build target" in props.name


def _nvml_counted_gpu() -> SimpleNamespace:
    """As the H200 machine's contained record run answered (natten 0.21.7's draft there, the
    session after the hook above): device_count() counts through NVML and says 1, is_available()
    asks the CUDA runtime and says False, and current_device() raises Error 304."""
    return _cuda(available=False, count=1)


def test_a_gpu_nvml_counts_and_cuda_cannot_open_is_answered_with_the_target(
        monkeypatch: pytest.MonkeyPatch) -> None:
    hook = _hook(monkeypatch, where="setup.py:84")
    cuda = _nvml_counted_gpu()
    hook._present_gpu(cuda)
    assert cuda.is_available() is True
    props = cuda.get_device_properties(cuda.current_device())
    assert (props.major, props.minor) == (9, 0)


def test_torchs_own_calls_still_get_the_real_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    hook = _hook(monkeypatch, where=None)
    cuda = _unopenable_gpu()
    hook._present_gpu(cuda)
    assert cuda.is_available() is True
    with pytest.raises(RuntimeError, match="Error 304"):
        cuda.device_count()


def test_bf16_support_is_the_targets_where_the_gpu_cannot_be_opened(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # deepspeed 0.19.8's setup.py:264 on the H200 machine, contained: torch's own
    # is_bf16_supported() opens the device and raised Error 304, which stopped the record.
    def opens_the_device(including_emulation: bool = True) -> bool:
        raise RuntimeError(ERROR_304)

    for target, supported in (("9.0", True), ("7.5", False)):
        hook = _hook(monkeypatch, where="setup.py:264")
        monkeypatch.setenv("FLASHBUILD_TARGET_CC", target)
        cuda = _nvml_counted_gpu()
        cuda.is_bf16_supported = opens_the_device
        hook._present_gpu(cuda)
        assert cuda.is_available() is True
        assert cuda.is_bf16_supported() is supported
    # torch's own callers still meet the real function.
    hook = _hook(monkeypatch, where=None)
    cuda = _nvml_counted_gpu()
    cuda.is_bf16_supported = opens_the_device
    hook._present_gpu(cuda)
    with pytest.raises(RuntimeError, match="Error 304"):
        cuda.is_bf16_supported()
