"""Benchmark: `flashbuild doctor` (cold and warm cache) against `python -m
torch.utils.collect_env`, plus `flashbuild --help` start-up. Prints a Markdown table.

Run (from the repository root, in the project's venv):

    python bench/bench_doctor.py --runs 5

collect_env needs torch, which is not a flashbuild dependency. To compare on a machine of
this project's kind, install torch beside the venv rather than into it, and put it on
PYTHONPATH for every command (doctor reads torch from the interpreter's import path):

    python -m pip install --target /tmp/torchsite torch==2.13.0
    PYTHONPATH=/tmp/torchsite python bench/bench_doctor.py --runs 5

Targets: cold ≤ collect_env (issue 2); warm < 0.3 s and ≤ 0.2 x collect_env (issue 21).
"Cold" runs each time with an empty cache folder (XDG_CACHE_HOME / LOCALAPPDATA); "warm"
reuses one folder filled by a first, unmeasured run.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: CPU seconds (user + system) of each run, by command line: on a loaded machine (the shared
#: 2-core one) wall time follows the load, CPU time much less.
_CPU: dict[str, list[float]] = {}


def _children_cpu() -> float:
    """CPU seconds of the finished child processes so far (0 where `resource` is missing:
    Windows)."""
    try:
        import resource
    except ImportError:
        return 0.0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _time(argv: list[str], env: dict[str, str]) -> float:
    before = _children_cpu()
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, check=False)
    elapsed = time.perf_counter() - start
    _CPU.setdefault(" ".join(argv), []).append(_children_cpu() - before)
    # doctor exits 3 when a build is blocked: that is a result, not a failure of the run.
    if done.returncode not in (0, 3):
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return elapsed


#: Set by main(): where every measured process keeps its bytecode (see main).
_PYCACHE: dict[str, str] = {}


def _base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, **_PYCACHE}


def _cache_env(folder: str) -> dict[str, str]:
    return {**_base_env(), "XDG_CACHE_HOME": folder, "LOCALAPPDATA": folder}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    runs = max(1, args.runs)
    py = sys.executable
    doctor = [py, "-m", "flashbuild", "doctor", "--json"]
    results: dict[str, float | None] = {}

    with tempfile.TemporaryDirectory() as base:
        # Bytecode as an installed package has it (pip compiles at install): a checkout that
        # cannot be written to, or PYTHONDONTWRITEBYTECODE, would otherwise make every run
        # compile flashbuild's modules again (0.2 s of the H100 machine's 0.5 s warm doctor).
        # One unmeasured run of each command fills the folder for doctor and collect_env alike.
        _PYCACHE["PYTHONPYCACHEPREFIX"] = str(Path(base) / "pycache")
        _time(doctor, _cache_env(str(Path(base) / "warmup")))
        warm = _cache_env(str(Path(base) / "warm"))
        _time(doctor, warm)  # fill the cache
        commands: dict[str, list[str]] = {
            "flashbuild doctor (cold cache)": doctor,
            "flashbuild doctor (warm cache)": doctor,
            "flashbuild --help": [py, "-m", "flashbuild", "--help"],
        }
        has_torch = importlib.util.find_spec("torch") is not None
        if has_torch:
            commands["python -m torch.utils.collect_env"] = [py, "-m", "torch.utils.collect_env"]
            _time(commands["python -m torch.utils.collect_env"], _base_env())
        # Interleaved: each round runs every command once, so a machine whose load changes
        # (the shared 2-core machine) weighs on all of them alike.
        samples: dict[str, list[float]] = {name: [] for name in commands}
        cpu: dict[str, list[float]] = {name: [] for name in commands}
        for i in range(runs):
            envs = {"flashbuild doctor (cold cache)": _cache_env(str(Path(base) / f"cold{i}")),
                    "flashbuild doctor (warm cache)": warm, "flashbuild --help": warm}
            for name, argv in commands.items():
                samples[name].append(_time(argv, envs.get(name, _base_env())))
                cpu[name].append(_CPU[" ".join(argv)][-1])
        results = {name: statistics.median(times) for name, times in samples.items()}
        cpu_median = {name: statistics.median(times) for name, times in cpu.items()}
        if not has_torch:
            results["python -m torch.utils.collect_env"] = None

    reference = results["python -m torch.utils.collect_env"]
    print(f"Median of {runs} runs, {sys.platform}, Python {sys.version.split()[0]}:\n")
    print("| command | median (s) | x collect_env | CPU, median (s) |")
    print("|---|---:|---:|---:|")
    for name, seconds in results.items():
        if seconds is None:
            print(f"| `{name}` | unavailable (torch is not importable) | | |")
            continue
        ratio = f"{seconds / reference:.2f}" if reference else "n/a"
        print(f"| `{name}` | {seconds:.3f} | {ratio} | {cpu_median[name]:.3f} |")
    if reference:
        cold = results["flashbuild doctor (cold cache)"] or 0.0
        warm_s = results["flashbuild doctor (warm cache)"] or 0.0
        print()
        print(f"- cold ≤ collect_env: {'met' if cold <= reference else 'NOT met'}")
        print(f"- warm ≤ 0.2 x collect_env and < 0.3 s: "
              f"{'met' if warm_s <= 0.2 * reference and warm_s < 0.3 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
