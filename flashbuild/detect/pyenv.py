"""The Python that will build and load the extension, torch, and the build tools from PyPI.

torch is read, not imported: `torch/version.py` holds its version, CUDA version and git hash
(importing torch takes ~2 s; FACTS.md / issue 2 "Performance"). Only the compiled arch list
needs `import torch`; that runs in a subprocess with a timeout and is cached by the
fingerprint of version.py, so an upgrade is re-probed. A torch that cannot be read or imported
is reported as a problem, never raised.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from flashbuild.detect.cache import NO_CACHE, ProbeCache, file_fingerprint
from flashbuild.errors import FlashbuildError
from flashbuild.proc import tail

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from flashbuild.proc import Runner

TORCH_TIMEOUT = 90.0
TOOL_TIMEOUT = 15.0
# torch.cuda.get_arch_list() returns [] when no GPU is usable; the compiled-in flags it
# reads (torch._C._cuda_getArchFlags, present in CUDA builds) answer on GPU-less machines too.
_ARCH_SCRIPT = ("import json, torch; f = getattr(torch._C, '_cuda_getArchFlags', None); "
                "a = f().split() if f else torch.cuda.get_arch_list(); "
                "print(json.dumps({'arch_list': a}))")


@dataclass(frozen=True)
class TorchInfo:
    """torch as installed in the interpreter's site-packages."""

    path: Path
    """torch/version.py that was read."""
    version: str | None
    cuda: str | None
    """torch.version.cuda: None for CPU builds."""
    git_version: str | None
    arch_list: tuple[str, ...] | None
    """torch.cuda.get_arch_list() (sm_90, sm_120, …); None when it could not be probed."""
    problems: tuple[str, ...] = ()

    @property
    def cuda_version(self) -> Version | None:
        try:
            return Version(self.cuda) if self.cuda else None
        except InvalidVersion:
            return None

    def to_json(self) -> dict[str, object]:
        return {"path": str(self.path), "version": self.version, "cuda": self.cuda,
                "git_version": self.git_version,
                "arch_list": list(self.arch_list) if self.arch_list is not None else None,
                "problems": list(self.problems)}


@dataclass(frozen=True)
class ToolInfo:
    """A build tool: pybind11, ninja, cmake."""

    name: str
    version: str | None
    path: str | None

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "version": self.version, "path": self.path}


@dataclass(frozen=True)
class PythonEnv:
    executable: str
    version: str
    implementation: str
    abi_tag: str
    """e.g. cp311 (or cp313t for free-threaded builds)."""
    ext_suffix: str
    """sysconfig EXT_SUFFIX: `.cpython-311-x86_64-linux-gnu.so` / `.cp311-win_amd64.pyd`."""
    venv: str | None
    """sys.prefix when inside a virtual environment."""
    site_packages: tuple[Path, ...]
    python_h: str | None = ""
    """Path of Python.h; None when the headers are not installed (Debian's python3-dev):
    sdists among the dependencies (tree-sitter-cmake) and every extension need them. Empty
    when not probed."""
    venv_module: bool = True
    """Whether `python -m venv` can create an environment with pip (`venv` and `ensurepip`
    importable; Debian ships ensurepip in python3-venv)."""

    def to_json(self) -> dict[str, object]:
        return {"executable": self.executable, "version": self.version,
                "implementation": self.implementation, "abi_tag": self.abi_tag,
                "ext_suffix": self.ext_suffix, "venv": self.venv,
                "site_packages": [str(p) for p in self.site_packages],
                "python_h": self.python_h, "venv_module": self.venv_module}


@dataclass(frozen=True)
class PyEnvReport:
    python: PythonEnv
    torch: TorchInfo | None
    tools: tuple[ToolInfo, ...]
    problems: tuple[str, ...] = ()

    def tool(self, name: str) -> ToolInfo | None:
        return next((t for t in self.tools if t.name == name), None)

    def to_json(self) -> dict[str, object]:
        return {"python": self.python.to_json(),
                "torch": self.torch.to_json() if self.torch else None,
                "tools": [t.to_json() for t in self.tools], "problems": list(self.problems)}


def current_python() -> PythonEnv:
    """The running interpreter (the one that builds and loads the extension)."""
    impl = sys.implementation.name
    short = {"cpython": "cp", "pypy": "pp"}.get(impl, impl)
    threaded = "t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""
    paths = sysconfig.get_paths()
    stdlib = {Path(paths[k]) for k in ("stdlib", "platstdlib")}
    # Where `import torch` would look: sys.path order (PYTHONPATH first), then the
    # interpreter's site-packages; the standard library and the current folder are skipped.
    on_path = [Path(p) for p in sys.path if p and Path(p).is_dir()]
    site = tuple(dict.fromkeys(
        [p for p in on_path if p not in stdlib and p.parent not in stdlib
         and p != Path.cwd()] + [Path(paths[k]) for k in ("purelib", "platlib")]))
    return PythonEnv(
        executable=sys.executable,
        version=".".join(str(p) for p in sys.version_info[:3]),
        implementation=impl,
        abi_tag=f"{short}{sys.version_info[0]}{sys.version_info[1]}{threaded}",
        ext_suffix=str(sysconfig.get_config_var("EXT_SUFFIX") or ""),
        venv=sys.prefix if sys.prefix != sys.base_prefix else None,
        site_packages=site,
        python_h=python_header(paths.get("include")),
        venv_module=all(importlib.util.find_spec(m) is not None for m in ("venv", "ensurepip")),
    )


def python_header(include: str | None) -> str | None:
    """Python.h in the interpreter's include folder, or None when it is not there."""
    header = Path(include) / "Python.h" if include else None
    return str(header) if header is not None and header.is_file() else None


def parse_torch_version_file(text: str) -> dict[str, str | None]:
    """The string assignments of torch/version.py (`__version__`, `cuda`, `git_version`),
    read with `ast` so nothing is executed. Raises ValueError when it is not Python."""
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise ValueError(f"not Python: {exc.msg} (line {exc.lineno})") from exc
    except (RecursionError, MemoryError) as exc:
        raise ValueError("not Python flashbuild can read: nested too deeply for the parser "
                         f"({type(exc).__name__})") from exc
    out: dict[str, str | None] = {}
    for node in tree.body:
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant) \
                and (value.value is None or isinstance(value.value, str)):
            out[target.id] = value.value
    return out


def torch_version(site_packages: Sequence[Path]) -> str | None:
    """`torch.__version__` of the first site-packages holding torch, read from its
    version.py without importing it (a recipe step's `when = { torch = ">=2.14" }`); None
    without torch or when the file does not say."""
    for sp in site_packages:
        try:
            text = (sp / "torch" / "version.py").read_text(encoding="utf-8")
        except OSError:
            continue
        try:
            return parse_torch_version_file(text).get("__version__") or None
        except ValueError:
            return None
    return None


def _decode_arch(value: object) -> tuple[str, ...] | None:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def probe_torch(site_packages: Sequence[Path], *, python: str, runner: Runner,
                env: Mapping[str, str], cache: ProbeCache = NO_CACHE,
                arch_list: bool = True) -> TorchInfo | None:
    """torch of the first site-packages holding it; None when torch is not installed."""
    version_py = next((sp / "torch" / "version.py" for sp in site_packages
                       if (sp / "torch").is_dir()), None)
    if version_py is None:
        return None
    problems: list[str] = []
    fields: dict[str, str | None] = {}
    try:
        fields = parse_torch_version_file(version_py.read_text(encoding="utf-8"))
        if not fields.get("__version__"):
            problems.append(f"{version_py} names no __version__")
    except (OSError, ValueError) as exc:
        problems.append(f"{version_py} could not be read: {exc}")
    arches: tuple[str, ...] | None = None
    if not problems and fields.get("cuda") is None:
        # A CPU build (torch.version.cuda is None) has no GPU code: nothing to import.
        arches = ()
    elif arch_list and not problems:
        def ask() -> tuple[str, ...] | None:
            try:
                done = runner.run([python, "-c", _ARCH_SCRIPT], env=env, timeout=TORCH_TIMEOUT,
                                  check=False)
            except FlashbuildError as exc:
                problems.append(f"`import torch` in a subprocess failed: {exc.what}")
                return None
            if not done.ok:
                problems.append(f"`import torch` failed (exit {done.returncode}): "
                                f"{tail(done.output, 3)}")
                return None
            try:
                lines = done.stdout.strip().splitlines()
                decoded = _decode_arch(json.loads(lines[-1])["arch_list"]) if lines else None
            except (ValueError, KeyError, TypeError):
                decoded = None
            if decoded is None:
                problems.append(f"torch's arch list could not be read from: "
                                f"{done.stdout.strip()[:200]!r}")
            return decoded

        arches = cache.fetch("torch-arch-list", file_fingerprint(version_py), ask,
                             encode=lambda v: list(v) if v is not None else None,
                             decode=_decode_arch)
    return TorchInfo(version_py, fields.get("__version__"), fields.get("cuda"),
                     fields.get("git_version"), arches, tuple(problems))


_VERSION_LINE = re.compile(r"(\d+\.\d+(?:\.\d+)?)")


def probe_tool(name: str, env: Mapping[str, str], runner: Runner,
               cache: ProbeCache = NO_CACHE) -> ToolInfo:
    """ninja / cmake: the binary on PATH and what its `--version` says (cached by the
    binary's fingerprint)."""
    path = runner.which(name, env)
    if path is None:
        return ToolInfo(name, None, None)

    def ask() -> str | None:
        try:
            done = runner.run([path, "--version"], env=env, timeout=TOOL_TIMEOUT, check=False)
        except FlashbuildError:
            return None
        match = _VERSION_LINE.search(done.output)
        return match[1] if match else None

    version = cache.fetch("tool-version", file_fingerprint(Path(path)), ask,
                          encode=lambda v: v, decode=lambda v: v if isinstance(v, str) else None)
    return ToolInfo(name, version, path)


def _normalized(project: str) -> str:
    """A project name as dist-info folders compare it (`Foo.Bar-baz` -> `foo_bar_baz`)."""
    return re.sub(r"[-_.]+", "_", project).lower()


def distribution_version(name: str, site_packages: Sequence[Path]) -> str | None:
    """The version of an installed distribution, from the name of its `NAME-VERSION.dist-info`
    folder in the first of `site_packages` that holds one. `importlib.metadata` finds the same
    but indexes every entry of every path folder first: 0.19 s in a profile of a warm doctor
    on the H100 machine's image (a few hundred packages)."""
    wanted = _normalized(name)
    for folder in site_packages:
        try:
            entries = sorted(e.name for e in os.scandir(folder) if e.name.endswith(".dist-info"))
        except OSError:
            continue
        for entry in entries:
            project, _sep, version = entry.removesuffix(".dist-info").rpartition("-")
            if version and _normalized(project) == wanted:
                return version
    return None


def probe_pyenv(env: Mapping[str, str], runner: Runner, *, python: PythonEnv | None = None,
                cache: ProbeCache = NO_CACHE) -> PyEnvReport:
    """Python, torch, pybind11, ninja and cmake. Never raises."""
    py = python or current_python()
    torch = probe_torch(py.site_packages, python=py.executable, runner=runner, env=env,
                        cache=cache)
    tools = (ToolInfo("pybind11", distribution_version("pybind11", py.site_packages), None),
             probe_tool("ninja", env, runner, cache), probe_tool("cmake", env, runner, cache))
    return PyEnvReport(py, torch, tools)
