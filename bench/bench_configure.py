"""CPU of a CMake configure in a fresh build folder, with and without the compiler probe's
seed (flashbuild/building/cmake_seed.py), side by side, run by run.

    python bench/bench_configure.py [--runs 5] [--cuda ROOT] [--project DIR]

Each run configures the project (default: tests/fixtures/detect/cmake_cuda, CXX + CUDA, one
kernel) into two new folders, one seeded and one not, alternating which goes first, and
reports the CPU seconds (user + system, CMake and every compiler it ran) and the wall time of
each. The probe itself runs once, before the runs, and is reported on its own line: it is
what the first configure of a new toolchain pays once. `--cuda ROOT` is a toolkit root with
bin/nvcc (default: the one `flashbuild doctor` would choose, shaped for CMake as the build
shapes it).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flashbuild import platforms  # noqa: E402
from flashbuild.building import cmake, cmake_seed  # noqa: E402
from flashbuild.building.toolkit import cmake_toolkit_root  # noqa: E402
from flashbuild.detect.cuda import find_toolkits  # noqa: E402
from flashbuild.proc import ProcessRunner  # noqa: E402


def _children_cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def _timed(fn: object) -> tuple[float, float]:
    cpu0, wall0 = _children_cpu(), time.monotonic()
    fn()  # type: ignore[operator]
    return _children_cpu() - cpu0, time.monotonic() - wall0


def _toolkit(arg: str | None, scratch: Path) -> Path:
    if arg:
        return Path(arg)
    search = find_toolkits(os.environ, ProcessRunner(), platforms.current())
    if search.chosen is None or search.chosen.nvcc is None:
        raise SystemExit("no CUDA toolkit found: pass --cuda ROOT")
    return cmake_toolkit_root(search.chosen, scratch / "toolkits")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cuda")
    ap.add_argument("--project", type=Path,
                    default=ROOT / "tests" / "fixtures" / "detect" / "cmake_cuda")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-configure-"))
    try:
        toolkit = _toolkit(args.cuda, scratch)
        tools = cmake.find_tools(ProcessRunner(), os.environ, platforms.current())
        env = {**os.environ, "XDG_CACHE_HOME": str(scratch / "cache")}

        def argv(build: Path) -> list[str]:
            return [str(tools.cmake), "-S", str(args.project), "-B", str(build), "-G", "Ninja",
                    "--no-warn-unused-cli", f"-DCMAKE_MAKE_PROGRAM={tools.ninja}",
                    f"-DCMAKE_CUDA_COMPILER={toolkit}/bin/nvcc", f"-DCUDAToolkit_ROOT={toolkit}",
                    "-DCMAKE_CUDA_ARCHITECTURES=90a-real"]

        def configure(build: Path, *, seeded: bool) -> None:
            if seeded:
                done = cmake_seed.seed(build, argv(build), env, runner=ProcessRunner(),
                                       platform=platforms.current())
                if not done.key:
                    raise SystemExit(f"not seeded: {done.why_not}")
            subprocess.run(argv(build), env=env, check=True, capture_output=True)

        probe_cpu, probe_wall = _timed(lambda: configure(scratch / "first", seeded=True))
        print(f"toolkit {toolkit}; cmake {tools.cmake}")
        print(f"probe + first seeded configure: {probe_cpu:.2f} s CPU, {probe_wall:.2f} s wall")
        rows: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for run in range(args.runs):
            order = (True, False) if run % 2 == 0 else (False, True)
            for seeded in order:
                build = scratch / f"run{run}-{'seeded' if seeded else 'plain'}"
                rows[seeded].append(_timed(lambda b=build, s=seeded: configure(b, seeded=s)))
        for seeded in (False, True):
            cpu = statistics.median(c for c, _w in rows[seeded])
            wall = statistics.median(w for _c, w in rows[seeded])
            label = "seeded" if seeded else "fresh (CMake's own checks)"
            print(f"{label:28} median of {args.runs}: {cpu:.2f} s CPU, {wall:.2f} s wall")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
