"""Test layers: unit tests are hermetic (an autouse guard fails any that starts a process),
integration tests run real tools, GPU tests skip cleanly without a GPU."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _has_gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount()) > 0
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return shutil.which("nvidia-smi") is not None and subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, check=False).returncode == 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu = None
    for item in items:
        if "gpu" in item.keywords:
            if gpu is None:
                gpu = _has_gpu()
            if not gpu:
                item.add_marker(pytest.mark.skip(reason="no NVIDIA GPU on this machine"))


class RealProcessStarted(AssertionError):
    pass


@pytest.fixture(autouse=True)
def _no_real_processes(request: pytest.FixtureRequest,
                       monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Unit tests replay recorded output; starting a real process is a test bug."""
    path = Path(str(request.node.fspath))
    if "unit" not in path.parts:
        yield
        return

    def refuse(*args: object, **kwargs: object) -> None:
        raise RealProcessStarted(f"a unit test started a real process: {args[:1]!r}")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    yield


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
