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
    """The warning when the compiler CMake and setuptools take (CXX, else `c++`) links no
    libstdc++.so into a shared library; "" when it does, or when the probe cannot tell."""
    try:
        argv = shlex.split(env.get("CXX") or "c++")
    except ValueError:
        return ""
    found = runner.which(argv[0], env) if argv else None
    if found is None:
        return ""

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

    # The compiler's file and the arguments CXX gives it (`ccache g++` vs `ccache clang++`).
    print_ = file_fingerprint(Path(found))
    key = None if print_ is None else "|".join([print_, *argv[1:]])
    static = cache.fetch("cxx-static-libstdcxx", key, ask,
                         encode=lambda v: v, decode=lambda v: v if isinstance(v, bool) else None)
    if not static:
        return ""
    return (f"CXX={env.get('CXX') or 'c++'} ({found}) links libstdc++ into shared libraries "
            "statically: a module built with it that links torch crashes at the first C++ "
            "exception thrown across it, and verify fails it; point CXX at a compiler that "
            "links libstdc++.so (e.g. CXX=/usr/bin/g++) (docs/verify.md)")
