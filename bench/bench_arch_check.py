"""The cost of the loader shim's GPU check at import, side by side with the same import with
the check off (`FLASHBUILD_ARCH_CHECK=0`), in fresh interpreters.

A package `benchpkg` is written to a temp folder with a rendered shim whose IMAGES name one
binary holding `--images` (default `sm_90a,compute_90`); each run starts `python -c` and times,
inside the child with `time.perf_counter_ns`, the `import benchpkg` (the shim and nothing
else: the package has no extension module). Runs alternate between the two variants so load
hits both alike. Also timed in-process, after one warm-up call: what the check asks NVML
(`nvml_gpus(details=False)`: init, the capabilities, shutdown) and, for comparison, the same
with names and UUIDs.

    python bench/bench_arch_check.py [--runs 30] [--images sm_90a,compute_90]

On a machine without an NVIDIA driver the check stops where NVML fails to load, so the number
is the floor (ctypes and the shim's own code). Point LD_LIBRARY_PATH at a folder holding the
stand-in `libnvidia-ml.so.1` (tests/fixtures/nvml/fake_nvml.c, `cc -shared -fPIC`) with
FAKE_NVML_GPUS set to time the whole path without a GPU; on the GPU machine the real driver's
NVML is timed. The median and the 90th percentile are printed, in milliseconds, with the GPUs
NVML reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flashbuild.installing import shim  # noqa: E402
from flashbuild.installing.resources import loader_shim  # noqa: E402

CHILD = ("import time, sys\n"
         "t0 = time.perf_counter_ns()\n"
         "import benchpkg\n"
         "t1 = time.perf_counter_ns()\n"
         "print((t1 - t0) / 1e6)\n")


def _package(folder: Path, images: tuple[str, ...]) -> Path:
    package = folder / "benchpkg"
    package.mkdir()
    (package / "__init__.py").write_text(shim.insert('"""bench."""\n'))
    (package / f"{shim.SHIM_MODULE}.py").write_text(
        shim.render([], package="benchpkg", images={"_C.so": images},
                    rebuild="flashbuild build TREE --arch {arch}"))
    return folder


def _once(src: Path, check: bool) -> float:
    env = {**os.environ, "PYTHONPATH": str(src), "FLASHBUILD_ARCH_CHECK": "1" if check else "0"}
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                          text=True, check=False, timeout=60)
    if done.returncode != 0:
        # A refusal is a result too (the images do not run on this GPU): it was timed up to
        # the raise, which is what an import costs then. Read the time from stderr's absence.
        raise SystemExit(f"import failed:\n{done.stderr[-2000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def _stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median_ms": round(statistics.median(ordered), 3),
            "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--images", default="sm_90a,compute_90")
    args = parser.parse_args()
    images = tuple(i for i in args.images.split(",") if i)
    gpus = loader_shim.nvml_gpus()  # warm-up (and what the check will see)
    nvml: list[float] = []      # what the check asks: the capabilities
    attached: list[float] = []  # and with every detail, for comparison
    for _ in range(args.runs):
        t0 = time.perf_counter_ns()
        loader_shim.nvml_gpus(details=False)
        t1 = time.perf_counter_ns()
        loader_shim.nvml_gpus(details=True)
        t2 = time.perf_counter_ns()
        nvml.append((t1 - t0) / 1e6)
        attached.append((t2 - t1) / 1e6)
    with tempfile.TemporaryDirectory() as tmp:
        src = _package(Path(tmp), images)
        on: list[float] = []
        off: list[float] = []
        for _ in range(args.runs):
            on.append(_once(src, check=True))
            off.append(_once(src, check=False))
    result = {
        "gpus": [g.describe() for g in gpus or []],
        "images": list(images),
        "runs": args.runs,
        "import_with_check": _stats(on),
        "import_check_off": _stats(off),
        "nvml_capabilities_in_process": _stats(nvml),
        "nvml_with_names_in_process": _stats(attached),
    }
    added = result["import_with_check"]["median_ms"] - result["import_check_off"]["median_ms"]
    result["check_cost_median_ms"] = round(added, 3)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
