"""Test layers: unit tests are hermetic (an autouse guard fails any that starts a process),
integration tests run real tools, GPU tests skip cleanly without a GPU."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run (derandomize): the README's test command
# must pass every time, so a new counterexample is found by changing a test, not by chance in CI.
settings.register_profile("flashbuild", derandomize=True)
settings.load_profile("flashbuild")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _stop_signals_at_their_defaults() -> None:
    """Started from a background job of a script (`cmd &` without job control: SIGINT
    ignored) or under `nohup` (SIGHUP ignored), pytest passes those ignores on to every
    process a test starts, and flashbuild keeps an inherited ignore on purpose: the tests
    that stop a build with a signal then waited 120 s for nothing. A test process starts its
    children as a terminal would, whoever started pytest (a handled signal is reset to its
    default at exec; an ignored one stays ignored)."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    for name in ("SIGHUP", "SIGTERM"):
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) is signal.SIG_IGN:
            signal.signal(sig, signal.SIG_DFL)


_stop_signals_at_their_defaults()


def _bytecode_kept_outside_the_trees() -> None:
    """With PYTHONDONTWRITEBYTECODE set (this workplace's machines set it), every pytest worker
    rewrote the asserts of all test modules again (about 8 s of CPU each: `--collect-only`
    under cProfile), and every `python -m flashbuild` a test starts compiled flashbuild's
    modules again (0.5 s of 1.3 s for the pipeline's imports). Bytecode is written instead,
    under one prefix folder outside the checkout (PYTHONPYCACHEPREFIX, which pytest's assertion
    rewriting honours too): never beside a source, so no tree a test copies or snapshots gains
    a `__pycache__`, which is what the variable was there to prevent. Set before xdist starts
    its workers, so they and every process a test starts inherit it."""
    import sys

    if os.environ.get("PYTHONPYCACHEPREFIX") or not (
            os.environ.get("PYTHONDONTWRITEBYTECODE") or sys.dont_write_bytecode):
        return
    # One folder per user, reused by later runs (a stale file is recompiled: Python checks
    # each source's mtime and size).
    owner = os.getuid() if hasattr(os, "getuid") else os.environ.get("USERNAME", "user")
    prefix = Path(tempfile.gettempdir()) / f"flashbuild-tests-pycache-{owner}"
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(prefix)
    sys.pycache_prefix = str(prefix)
    sys.dont_write_bytecode = False
    # flashbuild's own modules compiled once here, before the workers start side by side and
    # each compiles them again.
    import compileall

    compileall.compile_dir(ROOT / "flashbuild", quiet=2, workers=1)


_bytecode_kept_outside_the_trees()


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


# The test files that take longest (each builds csrc/ or a corpus tree with nvcc), slowest
# first. xdist (`--dist loadfile --no-loadscope-reorder`) hands files to its workers in
# collection order, so these start first and the many short files fill in at the end; left in
# the order xdist's default reorder gives (most tests first), a one-test file that compiles for
# a minute or two started last and one worker sat idle while the other ran it. First the files
# whose tests are mostly `heavy` (minutes each with FLASHBUILD_HEAVY_TESTS=1, next to nothing
# without), then the default run's slowest, as measured with `--durations` on the project's
# 2-core machine (2026-11-28, after the minikern fixture stopped using pybind11). Only the
# order depends on this list: a file missing from it, or a stale entry, costs time, never a
# result.
SLOW_FILES = (
    "tests/integration/test_csrc_build.py",
    "tests/integration/test_scan_recipe_init.py",
    "tests/integration/test_patch_csrc.py",
    "tests/integration/test_torchext_fixture.py",
    "tests/integration/test_build_reinstall.py",
    "tests/integration/test_introspect.py",
    "tests/integration/test_verify_dynamic_smem.py",
    "tests/integration/test_corpus.py",
    "tests/integration/test_build_e2e.py",
    "tests/integration/test_seed_recipes.py",
    "tests/integration/test_quickstart_resolves.py",
    "tests/integration/test_build_zeroconfig.py",
    "tests/integration/test_introspect_corpus.py",
    "tests/integration/test_zeroconfig_corpus.py",
)
# After those: the rest of each layer, the compiling layers before the quick ones.
LAYER_ORDER = ("integration", "reliability", "windows_semantics", "gpu", "unit")


def _run_order(item: pytest.Item) -> tuple[int, int]:
    path = Path(str(item.fspath)).resolve()
    relative = path.relative_to(ROOT).as_posix() if ROOT in path.parents else path.as_posix()
    if relative in SLOW_FILES:
        return (0, SLOW_FILES.index(relative))
    layer = next((i for i, name in enumerate(LAYER_ORDER) if name in path.parts),
                 len(LAYER_ORDER))
    return (1, layer)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto`: two workers per core, at most four more than the cores. Most tests wait on
    a child (a pip, a setup.py importing torch, nvcc starting, a bounded timeout) for much of
    their time, so one worker per core left the cores idle: on the project's 2-core machine
    the default run took 13 min 9 s with 2 workers and 8 min 43 s with 3 (2026-11-28, under
    the same helpers' load; docs/development.md). PYTEST_XDIST_AUTO_NUM_WORKERS still wins,
    as xdist documents."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own hook reads it
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)
    return min(2 * cores, cores + 4)


#: Opts into the `heavy` tests: each compiles the whole of csrc/ or a corpus tree again for one
#: or two minutes on 2 cores, re-proving on a larger tree what a quicker test of the default
#: run proves (the README's test command stays under 10 minutes). CI's Linux job sets it.
HEAVY_VARIABLE = "FLASHBUILD_HEAVY_TESTS"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A stable sort by file: every file's tests stay together and in their own order.
    items.sort(key=_run_order)
    heavy = pytest.mark.skip(reason=f"heavy (compiles for minutes): {HEAVY_VARIABLE}=1 runs it")
    gpu = None
    for item in items:
        if "heavy" in item.keywords and os.environ.get(HEAVY_VARIABLE) != "1":
            item.add_marker(heavy)
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


#: Names a file to which every test appends one line: node id, CPU seconds of the test process
#: and of the children it waited for, wall seconds (setup, call and teardown; a module
#: fixture's work counts to the file's first test). The suite is CPU-bound on 2 cores, and under
#: load `--durations` shows waiting, not work: this shows what each file costs
#: (docs/development.md sums it per file).
CPU_LEDGER_VARIABLE = "FLASHBUILD_TEST_CPU"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    ledger = os.environ.get(CPU_LEDGER_VARIABLE)
    if not ledger:
        yield
        return
    import resource  # POSIX only: imported when the ledger is asked for
    import time

    def cpu() -> tuple[float, float]:
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime

    (own0, kids0), wall0 = cpu(), time.monotonic()
    yield
    (own1, kids1), wall1 = cpu(), time.monotonic()
    line = (f"{item.nodeid}\t{own1 - own0:.2f}\t{kids1 - kids0:.2f}\t"
            f"{wall1 - wall0:.2f}\n")
    # One short write per line in append mode: lines from several workers do not interleave.
    with open(ledger, "a", encoding="utf-8") as out:
        out.write(line)


# --- the reliability suite's ledger (tests/reliability/helpers.py) ------------------------


def pytest_configure(config: pytest.Config) -> None:
    """One ledger folder per run, made by the main process; each xdist worker is told where
    it is through its `workerinput` (see pytest_configure_node)."""
    from tests.reliability.helpers import LEDGER_ENV

    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and "reliability_ledger" in workerinput:
        os.environ[LEDGER_ENV] = workerinput["reliability_ledger"]
    elif workerinput is None:
        os.environ[LEDGER_ENV] = tempfile.mkdtemp(prefix="flashbuild-reliability-")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: object) -> None:
    """pytest-xdist: hand the main process's ledger folder to each worker."""
    from tests.reliability.helpers import LEDGER_ENV

    node.workerinput["reliability_ledger"] = os.environ[LEDGER_ENV]  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests.reliability.helpers import LEDGER_ENV, totals

    if hasattr(terminalreporter.config, "workerinput"):
        return  # an xdist worker: only the main process reads (and removes) the ledger
    folder = os.environ.get(LEDGER_ENV)
    if not folder or not Path(folder).is_dir():
        return
    counts = totals(Path(folder))
    shutil.rmtree(folder, ignore_errors=True)
    if counts["cases"]:
        terminalreporter.write_sep("=", "reliability suite")
        terminalreporter.write_line(
            f"cases {counts['cases']}, clear errors {counts['clear errors']} of "
            f"{counts['error cases']} error cases, data lost {counts['data lost']}, tree "
            f"changed {counts['tree changed']}, hangs {counts['hangs']}, left running "
            f"{counts['left running']}, false passes {counts['false passes']}, internal errors "
            f"{counts['internal errors']}")
