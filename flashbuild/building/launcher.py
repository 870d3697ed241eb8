"""Compiler launchers: sccache or ccache in front of nvcc and the host compiler.

`CMAKE_<LANG>_COMPILER_LAUNCHER` works with Ninja (FACTS.md, "GPU architectures"). sccache
caches nvcc; ccache cannot cache most nvcc calls because CMake compiles CUDA with `-MD`
(`--generate-dependencies-with-compile`), so with ccache only the C++ side is launched
through it (FACTS.md, "Building").
"""

from __future__ import annotations

import contextlib
import json
import shlex
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args

from flashbuild.errors import ToolchainError, UsageError

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from flashbuild.proc import Runner

LauncherChoice = Literal["none", "auto", "sccache", "ccache"]
_ORDER: tuple[str, ...] = ("sccache", "ccache")
_CHOICES: dict[str, LauncherChoice] = {c: c for c in get_args(LauncherChoice)}


@dataclass(frozen=True)
class Launcher:
    """The chosen launcher, and whether nvcc goes through it too."""

    name: str
    path: Path
    cuda: bool
    note: str = ""


def parse_launcher(text: str) -> LauncherChoice:
    choice = _CHOICES.get(text.strip().lower())
    if choice is not None:
        return choice
    raise UsageError(f"`--launcher {text}` is not a launcher flashbuild knows",
                     fix="use none, auto, sccache or ccache")


def choose_launcher(choice: LauncherChoice, runner: Runner,
                    env: Mapping[str, str]) -> Launcher | None:
    """`auto` picks sccache, then ccache, when installed; a named one must exist."""
    if choice == "none":
        return None
    names = _ORDER if choice == "auto" else (choice,)
    for name in names:
        found = runner.which(name, env)
        if found:
            return _make(name, Path(found))
    if choice == "auto":
        return None
    raise ToolchainError(
        f"the compiler launcher {choice} was not found",
        evidence=f"`{choice}` is not on the PATH flashbuild builds with",
        fix=f"install {choice} (e.g. `pip install {choice}` where a wheel exists, or the OS "
        "package) or use `--launcher auto` / `--launcher none`",
    )


def _make(name: str, path: Path) -> Launcher:
    if name == "ccache":
        return Launcher(name, path, cuda=False,
                        note="ccache launches only the C++ compiles: CMake passes nvcc -MD, "
                        "which ccache cannot cache")
    return Launcher(name, path, cuda=True)


# --- the setuptools backend ------------------------------------------------------------------

def setuptools_env(launcher: Launcher, *, nvcc: Path, wrapper_dir: Path,
                   env: Mapping[str, str], msvc_host: bool) -> tuple[dict[str, str], str]:
    """The variables that put the launcher in front of torch.utils.cpp_extension's compiles,
    and what they reach (for the report).

    cpp_extension writes `nvcc = $PYTORCH_NVCC` into its build.ninja verbatim, so nvcc goes
    through "sccache nvcc" on every OS. The host compiler is `cxx = shell-quoted($CXX)`: a
    command with a space would become one quoted word, so CXX names a one-line wrapper script
    instead. With MSVC (Windows) the ninja rule runs a bare `cl`, which CXX does not change,
    so the host compiles are not reached there (only nvcc is). TORCH_NO_COMPILER_WRAPPER
    stops torch >= 2.13 from putting whichever of ccache/sccache it finds on PATH in front
    a second time (it prefers ccache, which cannot cache nvcc's -MD calls)."""
    out: dict[str, str] = {"TORCH_NO_COMPILER_WRAPPER": "1"}
    reached: list[str] = []
    if launcher.cuda:
        out["PYTORCH_NVCC"] = f'"{launcher.path}" "{nvcc}"' if msvc_host else \
            shlex.join([str(launcher.path), str(nvcc)])
        reached.append("nvcc")
        # A setup.py that runs CMake itself (natten: `cmake --build` of its own CMakeLists)
        # never reads PYTORCH_NVCC; CMake >= 3.17 takes a target's CUDA launcher from this
        # variable on the first configure of a folder (its envvar docs). The host compiles
        # of such a CMake already go through the CXX wrapper below, which CMake picks as
        # its C++ compiler. A value the user set wins.
        if "CMAKE_CUDA_COMPILER_LAUNCHER" not in env:
            out["CMAKE_CUDA_COMPILER_LAUNCHER"] = str(launcher.path)
    if not msvc_host:
        cxx = env.get("CXX") or "c++"
        wrapper_dir.mkdir(parents=True, exist_ok=True)
        script = wrapper_dir / "cxx"
        script.write_text("#!/bin/sh\n# flashbuild: the host compiler through "
                          f"{launcher.name}\nexec {shlex.join([str(launcher.path), cxx])} "
                          '"$@"\n', encoding="utf-8")
        script.chmod(0o755)
        out["CXX"] = str(script)
        reached.append(cxx)
    what = " and ".join(reached) or "nothing"
    return out, f"{launcher.name} ({what})"


@dataclass(frozen=True)
class StageRate:
    """One stage's cache hits and misses in this build (sccache's language names: C/C++,
    CUDA, and since 0.10 nvcc's device stages, e.g. PTX and CUBIN, separately)."""

    stage: str
    hits: int
    misses: int

    @property
    def requests(self) -> int:
        return self.hits + self.misses

    def text(self) -> str:
        pct = 100 * self.hits // self.requests if self.requests else 0
        return f"{self.stage} {self.hits}/{self.requests} ({pct}%)"


def read_stats(launcher: Launcher, runner: Runner,
               env: Mapping[str, str]) -> dict[str, tuple[int, int]] | None:
    """sccache's hit and miss counts per stage so far (None: not sccache, or unreadable)."""
    if launcher.name != "sccache":
        return None
    done = runner.run([str(launcher.path), "--show-stats", "--stats-format=json"], env=env,
                      timeout=60, check=False)
    if not done.ok:
        return None
    try:
        stats = json.loads(done.stdout)["stats"]
        hits = stats["cache_hits"]["counts"]
        misses = stats["cache_misses"]["counts"]
    except (ValueError, KeyError, TypeError):
        return None
    return {k: (int(hits.get(k, 0)), int(misses.get(k, 0))) for k in {*hits, *misses}}


def rates(before: Mapping[str, tuple[int, int]] | None,
          after: Mapping[str, tuple[int, int]] | None) -> tuple[StageRate, ...]:
    """This build's hits per stage: the counts after it less those before it."""
    if after is None:
        return ()
    old = before or {}
    out = []
    for stage in sorted(after):
        h0, m0 = old.get(stage, (0, 0))
        h1, m1 = after[stage]
        if h1 - h0 or m1 - m0:
            out.append(StageRate(stage, h1 - h0, m1 - m0))
    return tuple(out)


def rates_note(launcher: Launcher, found: tuple[StageRate, ...]) -> str:
    """The report line: every stage, the device stages included, and the overall rate over
    all of them (counting only the C/C++ and CUDA entries would overstate it)."""
    if not found:
        return f"{launcher.name}: no compile of this build went through the cache"
    total = StageRate("all stages", sum(r.hits for r in found), sum(r.misses for r in found))
    return f"{launcher.name} hits this build: " + "; ".join(r.text() for r in (*found, total))


#: sccache's server port unless SCCACHE_SERVER_PORT says otherwise (its docs, Configuration).
SCCACHE_DEFAULT_PORT = 4226


def sccache_server_running(env: Mapping[str, str]) -> bool:
    """Whether an sccache server listens on this environment's port (a connect, nothing
    sent: `sccache --show-stats` would start one)."""
    try:
        port = int(env.get("SCCACHE_SERVER_PORT", SCCACHE_DEFAULT_PORT))
    except ValueError:
        return False
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def serving(launcher: Launcher | None, runner: Runner, env: Mapping[str, str],
            notes: list[str]) -> Launcher | None:
    """`launcher`, or None with a note when it is sccache and no server can run: every
    compile through it would then fail ("sccache: error: ..."), where a build without the
    cache only takes longer (a CI cache outage compiles locally, docs/ci.md). Seen on the
    GPU machine, 2026-11-28: `sccache --start-server` failed and the first compile through
    it, torch's `cxx --version`, failed the build. A server already running serves; else one
    is started and stopped again (`build_server` starts the build's own)."""
    if launcher is None or launcher.name != "sccache" or sccache_server_running(env):
        return launcher
    start_env = {**env, "SCCACHE_IDLE_TIMEOUT": env.get("SCCACHE_IDLE_TIMEOUT", "0")}
    done = runner.run([str(launcher.path), "--start-server"], env=start_env, timeout=60,
                      check=False)
    if done.ok:
        runner.run([str(launcher.path), "--stop-server"], env=env, timeout=60, check=False)
        return launcher
    said = next((line.strip() for line in (done.stderr + done.stdout).splitlines()
                 if line.strip()), f"exit {done.returncode}")
    notes.append(f"sccache: its server does not start here ({said[:200]}), so this build "
                 "compiles without a launcher; `sccache --start-server` shows why")
    return None


@contextlib.contextmanager
def build_server(launcher: Launcher | None, runner: Runner,
                 env: Mapping[str, str]) -> Iterator[str]:
    """An sccache server that lives through the whole build; yields a note for the report
    ('' when there is nothing to say).

    sccache's server exits after SCCACHE_IDLE_TIMEOUT seconds (600 by default) with no new
    request and drops a compile still running (mozilla/sccache#204): a CUDA unit that
    compiles for longer is compiled again without the cache, its result is never stored, and
    the server's counts start from zero (ROCm/TheRock#5672 saw 0/0/0 stats for the same
    reason; causal-conv1d's 45-minute first build here, docs/benchmarks.md). So with no
    server running, flashbuild starts one with no idle timeout (unless the environment sets
    one) and stops it after the build; a server already running is the user's and is left as
    it is."""
    if launcher is None or launcher.name != "sccache":
        yield ""
        return
    if sccache_server_running(env):
        yield ("sccache: a server was already running, so its idle timeout applies "
               "(SCCACHE_IDLE_TIMEOUT, 600 s by default): a unit that compiles for longer "
               "misses the cache (mozilla/sccache#204); start it with SCCACHE_IDLE_TIMEOUT=0")
        return
    start_env = {**env, "SCCACHE_IDLE_TIMEOUT": env.get("SCCACHE_IDLE_TIMEOUT", "0")}
    started = runner.run([str(launcher.path), "--start-server"], env=start_env, timeout=60,
                         check=False).ok
    try:
        yield "" if started else ("sccache: `sccache --start-server` failed; the compiles "
                                  "start a server with the default idle timeout (600 s)")
    finally:
        if started:
            runner.run([str(launcher.path), "--stop-server"], env=env, timeout=60,
                       check=False)
