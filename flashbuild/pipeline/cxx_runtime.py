"""Whether the C++ compiler a build takes links libstdc++ into shared libraries statically.

The GPU machine's image names `CXX=/opt/gcc/bin/g++`, a g++ wrapper whose own `-B` folders
hold `libstdc++.a` and no `libstdc++.so`: every extension built with it carries a private copy
of the C++ runtime, and the first C++ exception thrown across it and torch's libraries
crashes the process (marlin's own test_errors, SIGSEGV; rebuilt with /usr/bin/g++ it raised
as it should). verify fails such a module (verifying/abi.py, private_cxx_runtime); this
probe says so before the build spends its time, as a warning: a library that links no torch
is not hurt by it. One shared-library link of a throwing function, cached per compiler.
"""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from flashbuild.detect.cache import ProbeCache, file_fingerprint
from flashbuild.errors import FlashbuildError
from flashbuild.verifying.abi import needed_libraries

if TYPE_CHECKING:
    from collections.abc import Mapping

    from flashbuild.runner import Runner

#: A throw needs the C++ runtime's `__cxa_throw`; no header, so the probe compiles in a blink.
_PROBE = "void flashbuild_probe(int n) { if (n) throw n; }\n"


def static_libstdcxx(env: Mapping[str, str], runner: Runner, cache: ProbeCache) -> str:
    """The warning when a compiler the build links with gives a shared library no
    libstdc++.so: CXX (else `c++`), which CMake and setuptools link with, and the CUDA host
    compiler (CUDAHOSTCXX, else NVCC_CCBIN), whose library folders CMake adds to every link
    line of a target with CUDA sources: torchmcubes on the H200 machine linked with
    /usr/bin/g++ and still took `libstdc++.a` from the `-L/opt/gcc/lib` that its nvcc host
    compiler (`-ccbin=/opt/gcc/bin/g++`) brought. "" when each links it, or when the probe
    cannot tell."""
    host = next(((n, env[n]) for n in ("CUDAHOSTCXX", "NVCC_CCBIN") if env.get(n)), None)
    for name, value in [("CXX", env.get("CXX") or "c++"), *([host] if host else [])]:
        found = _links_static(value, env, runner, cache)
        if found is None:
            continue
        how = "links libstdc++ into shared libraries statically" if name == "CXX" else (
            "links libstdc++ into shared libraries statically, and CMake adds its library "
            "folders to the link of every target with CUDA sources")
        return (f"{name}={value} ({found}) {how}: a module built with it that links torch "
                "crashes at the first C++ exception thrown across it, and verify fails it; "
                f"point {name} at a compiler that links libstdc++.so (e.g. "
                f"{name}=/usr/bin/g++) (docs/verify.md)")
    return ""


def _links_static(value: str, env: Mapping[str, str], runner: Runner,
                  cache: ProbeCache) -> str | None:
    """The compiler's path when `value` (a compiler, with arguments) links a shared library
    without libstdc++.so; None otherwise or when it cannot tell."""
    try:
        argv = shlex.split(value)
    except ValueError:
        return None
    found = runner.which(argv[0], env) if argv else None
    if found is None:
        return None

    def ask() -> bool | None:
        with tempfile.TemporaryDirectory(prefix="flashbuild-cxxrt-") as scratch:
            source, library = Path(scratch) / "probe.cpp", Path(scratch) / "probe.so"
            source.write_text(_PROBE, encoding="utf-8")
            try:
                done = runner.run([found, *argv[1:], "-shared", "-fPIC", str(source), "-o",
                                   str(library)], env=env, timeout=120, check=False)
                if not done.ok:
                    return None
                return not any(n.startswith("libstdc++.so") for n in needed_libraries(library))
            except FlashbuildError:
                return None

    # The compiler's file and the arguments given to it (`ccache g++` vs `ccache clang++`).
    print_ = file_fingerprint(Path(found))
    key = None if print_ is None else "|".join([print_, *argv[1:]])
    static = cache.fetch("cxx-static-libstdcxx", key, ask,
                         encode=lambda v: v, decode=lambda v: v if isinstance(v, bool) else None)
    return found if static else None
