"""Build performance: no-op rebuild, cold-build overhead over raw cmake + ninja, peak memory.

    python bench/bench_build.py [--recipe R] [--arch sm_90a] [--torch-python PY]

(a) no-op rebuild: `flashbuild build` run twice (the second is timed) vs `pip install
    --no-build-isolation .` of bench/torch_ext run twice (needs an interpreter with torch:
    --torch-python; skipped without one);
(b) cold build: flashbuild's total vs the raw `cmake` + `ninja` commands it drives (taken from
    its own configure stamp and re-run in a fresh folder), both after one untimed warm-up build;
(c) peak RSS of the cold build under --jobs auto, children included (psutil).
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent


def timed(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, int]:
    """Wall time and peak RSS (bytes, the process tree summed) of one command."""
    start = time.perf_counter()
    proc = psutil.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE, text=True)
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            try:
                procs = [proc, *proc.children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in procs if p.is_running()))
            except psutil.Error:
                pass
            time.sleep(0.05)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    _, err = proc.communicate()
    stop.set()
    thread.join()
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{err[-2000:]}")
    return time.perf_counter() - start, peak


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", default="csrc")
    ap.add_argument("--source", default=None)
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--cuda", default=None)
    ap.add_argument("--torch-python", default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fb-bench-"))
    def fb_build(folder: str) -> list[str]:
        argv = [sys.executable, "-m", "flashbuild", "build", "--recipe", args.recipe, "--arch",
                args.arch, "--install", "none", "--launcher", "none", "--json",
                "--build-dir", str(work / folder)]
        if args.source:
            argv += ["--source", args.source]
        if args.cuda:
            argv += ["--cuda", args.cuda]
        return argv

    rows: list[tuple[str, str, str]] = []
    # A throwaway first build warms what both sides share (page cache of nvcc and the
    # sources, flashbuild's probe cache and bytecode), so the first timed build is not
    # charged for them and the comparison below is of the builds alone.
    timed(fb_build("warm-up"), ROOT)
    fb = fb_build("fb")
    cold, peak = timed(fb, ROOT)
    free = psutil.virtual_memory().available
    _, _ = timed(fb, ROOT)
    noop, _ = timed(fb, ROOT)
    rows.append(("no-op rebuild, flashbuild", f"{noop:.3f} s", "second unchanged run"))

    stamp = json.loads((work / "fb" / "flashbuild-configure.json").read_text())
    argv = [a.replace(str(work / "fb"), str(work / "raw")) for a in stamp["argv"]]
    # The raw build compiles the same staged (patched) mirror flashbuild compiled.
    (work / "raw").mkdir()
    (work / "raw" / "src").symlink_to(work / "fb" / "src", target_is_directory=True)
    ninja_exe = next(a.split("=", 1)[1] for a in argv if a.startswith("-DCMAKE_MAKE_PROGRAM="))
    jobs = str(os.cpu_count() or 1)
    t_cfg, _ = timed(argv, ROOT)
    t_ninja, _ = timed([ninja_exe, "-C", str(work / "raw"), "-j", jobs], ROOT)
    raw = t_cfg + t_ninja
    rows.append(("cold build, flashbuild (--jobs auto)", f"{cold:.2f} s", ""))
    rows.append(("cold build, raw cmake + ninja", f"{raw:.2f} s",
                 f"overhead {100 * (cold - raw) / raw:+.1f} %"))
    rows.append(("peak RSS of the cold build", f"{peak / 2**20:.0f} MiB",
                 f"free RAM before: {free / 2**30:.1f} GiB"))

    if args.torch_python:
        ext = ROOT / "bench" / "torch_ext"
        from flashbuild.arch import parse_arch_spec

        env = {**os.environ, "TORCH_CUDA_ARCH_LIST": parse_arch_spec(args.arch).torch(),
               "FLASHBUILD_BENCH_SOURCE": args.source or str(ROOT / "csrc")}
        pip = [args.torch_python, "-m", "pip", "install", "--no-build-isolation", "-q", "."]
        timed(pip, ext, env)
        torch_noop, _ = timed(pip, ext, env)
        rows.append(("no-op rebuild, torch CUDAExtension (pip)", f"{torch_noop:.3f} s",
                     f"flashbuild is {torch_noop / noop:.1f}x faster"))
    else:
        rows.append(("no-op rebuild, torch CUDAExtension (pip)", "not run",
                     "pass --torch-python with a torch install"))

    print("| measurement | value | note |\n|---|---|---|")
    for name, value, note in rows:
        print(f"| {name} | {value} | {note} |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
