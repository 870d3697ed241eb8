"""Replacing files that Defender or the indexer hold for a moment (issue 20): the platform
layer's one bounded retry, and the install that goes through it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from flashbuild import platforms
from flashbuild.building import artifacts
from flashbuild.installing import install as inst
from flashbuild.platforms import files
from flashbuild.platforms.linux import LinuxPlatform
from flashbuild.platforms.windows import WindowsPlatform
from tests.fakes import ReplayRunner

REAL_REPLACE = os.replace


class Flaky:
    """`os.replace` that fails `n` times with `error` (WinError 32 reaches Python as
    PermissionError), then replaces for real."""

    def __init__(self, n: int, error: OSError | None = None) -> None:
        self.n, self.calls = n, 0
        self.error = error or PermissionError(13, "The process cannot access the file "
                                                  "because it is being used by another process")

    def __call__(self, src: Path, dst: Path) -> None:
        self.calls += 1
        if self.calls <= self.n:
            raise self.error
        REAL_REPLACE(src, dst)


def _pair(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "new").write_bytes(b"new")
    (tmp_path / "old").write_bytes(b"old")
    return tmp_path / "new", tmp_path / "old"


def test_a_held_file_is_replaced_after_a_few_tries(tmp_path: Path) -> None:
    src, dst = _pair(tmp_path)
    flaky, waits = Flaky(3), []
    files.replace_with_retry(src, dst, replace=flaky, sleep=waits.append)
    assert dst.read_bytes() == b"new" and not src.exists()
    assert flaky.calls == 4 and waits == list(files.RETRY_DELAYS[:3])


def test_the_retry_is_bounded_and_raises_the_last_error(tmp_path: Path) -> None:
    src, dst = _pair(tmp_path)
    flaky, waits = Flaky(100), []
    with pytest.raises(PermissionError):
        files.replace_with_retry(src, dst, replace=flaky, sleep=waits.append)
    assert flaky.calls == len(files.RETRY_DELAYS) + 1 and waits == list(files.RETRY_DELAYS)
    assert sum(files.RETRY_DELAYS) < 2.0  # a real lock surfaces within two seconds
    assert dst.read_bytes() == b"old"


def test_other_errors_are_not_retried(tmp_path: Path) -> None:
    src, dst = _pair(tmp_path)
    flaky, waits = Flaky(1, FileNotFoundError(2, "gone")), []
    with pytest.raises(FileNotFoundError):
        files.replace_with_retry(src, dst, replace=flaky, sleep=waits.append)
    assert flaky.calls == 1 and waits == []


def test_linux_does_not_retry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src, dst = _pair(tmp_path)
    flaky = Flaky(1)
    monkeypatch.setattr(os, "replace", flaky)
    with pytest.raises(PermissionError):
        LinuxPlatform().replace(src, dst)
    assert flaky.calls == 1


@pytest.mark.skipif(sys.platform == "win32", reason="stands in for os.replace on Linux")
def test_inplace_install_rides_out_a_scanner(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: the first WinError 32 on `_C.pyd.flashbuild-tmp -> _C.pyd` was an InstallError.
    pkg = tmp_path / "flashkern"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    module = tmp_path / "_C.pyd"
    module.write_bytes(b"MZ fresh")
    plan = inst.InstallPlan(
        mode="inplace", package="flashkern", package_dir=pkg,
        artifacts=(artifacts.BuiltArtifact(module, "module", "_C"),), dll_dirs=(),
        manifest_name="flashbuild-manifest.json", manifest=b"{}\n", python=sys.executable,
        work_dir=tmp_path / "build")
    (tmp_path / "build").mkdir()
    flaky = Flaky(2)
    monkeypatch.setattr(platforms, "current", WindowsPlatform)
    monkeypatch.setattr(os, "replace", flaky)
    monkeypatch.setattr(files, "RETRY_DELAYS", (0.0,) * 7)
    result = inst.install(plan, ReplayRunner(), {})
    assert (pkg / "_C.pyd").read_bytes() == b"MZ fresh" and not result.skipped
    assert flaky.calls > 2
