"""`flashbuild doctor`: run every probe in parallel, apply the rules, report.

Probes are independent, so they run at once in a thread pool (most of their time is spent
waiting on nvcc, `import torch` in a subprocess, or vswhere); each also has its own process
timeouts. A probe that raises or overruns becomes a `probe.failed` warning: doctor never ends
in a traceback, whatever the machine. Exit code: 0 when nothing blocks a build, 3
(ToolchainError.exit_code) when an error verdict exists, 2 for bad `--arch` input.
"""

from __future__ import annotations

import os
import sysconfig
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flashbuild import platforms
from flashbuild.arch import FIRST_CUDA, Arch, ArchSpec, parse_arch_spec
from flashbuild.console import ui
from flashbuild.detect.cache import ProbeCache
from flashbuild.detect.compilers import probe_host_compilers
from flashbuild.detect.cuda import choose_for, find_toolkits, python_site_packages
from flashbuild.detect.gpu import probe_gpus
from flashbuild.detect.host import probe_host
from flashbuild.detect.pyenv import current_python, probe_pyenv
from flashbuild.detect.rules import Findings, blocking, evaluate
from flashbuild.errors import FlashbuildError, ToolchainError, UsageError
from flashbuild.proc import ProcessRunner

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from flashbuild.detect.compilers import HostCompilers
    from flashbuild.detect.cuda import ToolkitSearch
    from flashbuild.detect.gpu import GpuReport
    from flashbuild.detect.host import HostInfo
    from flashbuild.detect.pyenv import PyEnvReport, PythonEnv
    from flashbuild.platforms.base import Platform, RegistryReader
    from flashbuild.proc import Runner

#: Seconds doctor waits for all probes together (each process also has its own timeout).
PROBE_BUDGET = 120.0


def _targets(spec: ArchSpec | None, gpus: GpuReport | None) -> tuple[tuple[Arch, ...], str]:
    caps = [g.capability for g in gpus.gpus] if gpus else []
    if spec is not None:
        if spec.native:
            try:
                spec = spec.resolve_native(caps)
            except UsageError:
                return tuple(t.arch for t in spec.targets), "--arch" if spec.targets else "none"
        return spec.archs, "--arch"
    found = sorted({Arch(*c) for c in caps if c[0] * 10 + c[1] in FIRST_CUDA})
    return (tuple(found), "gpus") if found else ((), "none")


def collect(env: Mapping[str, str], runner: Runner, platform: Platform, *,
            spec: ArchSpec | None = None, explicit: Path | None = None,
            cache: ProbeCache | None = None, build_dir: Path | None = None,
            python: PythonEnv | None = None, nvml: Any = None,
            registry: RegistryReader | None = None, cores: int | None = None,
            memory: tuple[int, int] | None = None,
            budget: float = PROBE_BUDGET,
            only: frozenset[str] | None = None) -> Findings:
    """Run every probe (or those named in `only`) in parallel and gather what they found.
    Never raises, but for a UsageError about the user's own input (`--cuda`)."""
    cache = cache or ProbeCache(None, enabled=False)
    py = python or current_python()
    tool_env = dict(env)
    scripts = sysconfig.get_path("scripts")
    if python is None and scripts:
        # The PyPI ninja/cmake live beside this interpreter even when its venv is not
        # activated (`.venv/bin/flashbuild doctor`).
        tool_env["PATH"] = scripts + platform.pathsep + env.get("PATH", "")
    probes: dict[str, Callable[[], object]] = {
        "toolkits": lambda: find_toolkits(
            env, runner, platform, explicit=explicit, cache=cache,
            site_packages=py.site_packages if python is not None else python_site_packages()),
        "compilers": lambda: probe_host_compilers(env, runner, platform, cache=cache),
        "gpus": lambda: probe_gpus(env, runner, nvml=nvml,
                                   driver_loaded=platform.nvidia_driver_loaded()),
        "python": lambda: probe_pyenv(tool_env, runner, python=py, cache=cache),
        "host": lambda: probe_host(env, platform, build_dir=build_dir or Path.cwd(),
                                   cores=cores, memory=memory, registry=registry),
    }
    if only is not None:
        probes = {name: probe for name, probe in probes.items() if name in only}
    results: dict[str, object] = {}
    failures: list[tuple[str, str]] = []
    pool = ThreadPoolExecutor(max_workers=len(probes), thread_name_prefix="probe")
    try:
        futures: dict[str, Future[object]] = {n: pool.submit(p) for n, p in probes.items()}
        deadline = time.monotonic() + budget
        for name, future in futures.items():
            try:
                results[name] = future.result(timeout=max(0.0, deadline - time.monotonic()))
            except FutureTimeout:
                failures.append((name, f"did not finish within {budget:g} s"))
            except UsageError:
                raise  # the user's own input (`--cuda` that is not a toolkit): not a probe's
            except FlashbuildError as exc:
                failures.append((name, exc.what))
            except Exception as exc:
                failures.append((name, f"{type(exc).__name__}: {exc}"))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    gpus: GpuReport | None = results.get("gpus")  # type: ignore[assignment]
    spec_targets, origin = _targets(spec, gpus)
    toolkits: ToolkitSearch | None = results.get("toolkits")  # type: ignore[assignment]
    if toolkits is not None:
        # The targets are known only now (the GPUs' when no --arch): the toolkit is chosen
        # for them by the function `flashbuild build` chooses with.
        toolkits = choose_for(toolkits, spec_targets)
    compilers: HostCompilers | None = results.get("compilers")  # type: ignore[assignment]
    pyenv: PyEnvReport | None = results.get("python")  # type: ignore[assignment]
    host: HostInfo | None = results.get("host")  # type: ignore[assignment]
    return Findings(platform=platform.name, toolkits=toolkits, compilers=compilers, gpus=gpus,
                    pyenv=pyenv, host=host, targets=spec_targets, target_origin=origin,
                    probe_failures=tuple(failures))


def run_doctor(*, arch: str | None, cuda: Path | None, as_json: bool, use_cache: bool) -> int:
    """The `doctor` command: returns its exit code (0, or 3 when a build is blocked); raises
    UsageError (exit 2) for an `--arch` it cannot parse."""
    from flashbuild.detect.report import render, to_document  # noqa: PLC0415  # start-up
    spec = parse_arch_spec(arch) if arch is not None else None
    platform = platforms.current()
    env = os.environ
    cache = ProbeCache(platform.user_cache_dir(env), enabled=use_cache)
    findings = collect(env, ProcessRunner(echo=ui.command), platform, spec=spec,
                       explicit=cuda, cache=cache)
    verdicts = evaluate(findings)
    if as_json:
        ui.emit_json(to_document(findings, verdicts))
    else:
        render(ui.human, findings, verdicts)
    return ToolchainError.exit_code if blocking(verdicts) else 0
