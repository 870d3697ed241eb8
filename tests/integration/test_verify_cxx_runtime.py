"""A module linked against torch's libraries that carries its own static copy of libstdc++
(marlin built with the H200 machine's CXX, a g++ wrapper whose `-B/opt/gcc/bin/` links it
statically: it imported, verified, and died with SIGSEGV at the first exception its own
test_errors provoked; built with /usr/bin/g++ the same test raised as it should). verify now
fails such a module, and passes the same module linked to libstdc++.so and a static-libstdc++
library that links no torch. The binaries are built here with real g++; `libc10.so` is a
stand-in library of that name."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from flashbuild.proc import ProcessRunner
from flashbuild.verifying import abi
from flashbuild.verifying.verify import Status, verify_install

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed"),
]

MODULE = """
#include <stdexcept>
extern "C" int c10_stand_in();
extern "C" int entry(int n) {
  if (n < 0) throw std::runtime_error("negative");
  return c10_stand_in() + n;
}
"""


def _build(folder: Path, name: str, *flags: str, torch: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "c10.c").write_text("int c10_stand_in(void) { return 1; }\n", encoding="utf-8")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(folder / "libc10.so"),
                    str(folder / "c10.c")], check=True, timeout=60)
    (folder / "m.cpp").write_text(MODULE if torch else MODULE.replace(
        "c10_stand_in() + n", "n").replace('extern "C" int c10_stand_in();', ""),
        encoding="utf-8")
    out = folder / name
    subprocess.run(["g++", "-shared", "-fPIC", *flags, "-o", str(out), str(folder / "m.cpp"),
                    *(["-L", str(folder), "-lc10"] if torch else [])], check=True, timeout=120)
    return out


def _cxx_checks(path: Path) -> list[tuple[Status, str]]:
    report = verify_install(path=path, runner=ProcessRunner(), import_module=False,
                            run_gpu=False)
    return [(c.status, c.summary) for c in report.checks
            if c.area == "abi" and "libstdc++" in c.summary]


def test_a_private_static_libstdcxx_beside_torch_fails_verify(tmp_path: Path) -> None:
    static = _build(tmp_path / "static", "mod_static.so", "-static-libstdc++")
    assert "defines __cxa_throw" in abi.private_cxx_runtime(static)
    found = _cxx_checks(static)
    assert [status for status, _ in found] == [Status.FAIL]
    assert "crashes the process" in found[0][1]


def test_a_shared_libstdcxx_or_no_torch_passes(tmp_path: Path) -> None:
    shared = _build(tmp_path / "shared", "mod_shared.so")
    assert abi.private_cxx_runtime(shared) == ""
    assert _cxx_checks(shared) == []
    alone = _build(tmp_path / "alone", "mod_alone.so", "-static-libstdc++", torch=False)
    assert abi.private_cxx_runtime(alone) == ""


def test_the_build_warns_when_cxx_links_libstdcxx_statically(tmp_path: Path) -> None:
    """The probe before a build (pipeline/cxx_runtime.py): a CXX that links libstdc++
    statically, like the GPU image's /opt/gcc wrapper, gets the warning; g++ itself none.
    The answer is cached per compiler."""
    from flashbuild.detect.cache import ProbeCache
    from flashbuild.pipeline.cxx_runtime import static_libstdcxx

    wrapper = tmp_path / "bin" / "g++-static"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {shutil.which("g++")} -static-libstdc++ "$@"\n',
                       encoding="utf-8")
    wrapper.chmod(0o755)
    cache = ProbeCache(tmp_path / "cache")
    env = {"PATH": f"{wrapper.parent}:/usr/bin:/bin", "CXX": str(wrapper)}
    warning = static_libstdcxx(env, ProcessRunner(), cache)
    assert "links libstdc++ into shared libraries statically" in warning
    assert "CXX=" in warning and "g++-static" in warning
    assert static_libstdcxx({**env, "CXX": "g++"}, ProcessRunner(), cache) == ""
    # Cached: the same answer without running the compiler again.
    assert static_libstdcxx(env, _NoRuns(), cache) == warning
    # The CUDA host compiler too: CMake adds its library folders to the link of a target with
    # CUDA sources (torchmcubes on the H200 machine: CXX=/usr/bin/g++, nvcc's host compiler
    # the wrapper, `-L/opt/gcc/lib` on the link line, libstdc++.a linked).
    host = static_libstdcxx({**env, "CXX": "g++", "CUDAHOSTCXX": str(wrapper)},
                            ProcessRunner(), cache)
    assert host.startswith(f"CUDAHOSTCXX={wrapper}") and "every target with CUDA" in host
    assert static_libstdcxx({**env, "CXX": "g++", "NVCC_CCBIN": "g++"}, ProcessRunner(),
                            cache) == ""


class _NoRuns(ProcessRunner):
    def run(self, *args: object, **kwargs: object) -> Any:  # type: ignore[override]
        raise AssertionError("the probe ran again")
