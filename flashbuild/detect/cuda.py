"""CUDA toolkits: every candidate, probed, and the one a build would use (and why).

Candidates come from `--cuda`, CUDA_HOME / CUDA_PATH / CUDA_ROOT / CUDA_PATH_V*, the nvcc on
PATH, the platform's standard install folders and the PyPI CUDA tree of the running
interpreter (`site-packages/nvidia/cu13`, FACTS.md "A CUDA toolchain from PyPI"). Each is
probed for its version (`nvcc --version`; falling back to version.json, then cuda.h's
CUDA_VERSION), the codes its nvcc can emit (`nvcc --list-gpu-code`: ask the tool rather than
hard-code, FACTS.md), its runtime-library folders, its layout and whether its headers exist.
Candidates are de-duplicated by real path. A failing probe yields "unknown" plus a problem
string, never an exception.
"""

from __future__ import annotations

import json
import os
import re
import site
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Literal

from packaging.version import InvalidVersion, Version

from flashbuild.detect.cache import NO_CACHE, ProbeCache, file_fingerprint
from flashbuild.errors import FlashbuildError, UsageError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from flashbuild.arch import Arch
    from flashbuild.platforms.base import Platform
    from flashbuild.proc import Runner

Layout = Literal["standard", "pypi"]
ArchProblem = Literal["too-old", "removed", "cannot-emit"]
VersionSource = Literal["nvcc", "version.json", "cuda.h", "unknown"]

#: Seconds one nvcc query may take before it is called hung.
NVCC_TIMEOUT = 30.0

# Priority of where a candidate came from, for the choice (lower wins).
_PRIORITY = {"--cuda": 0, "CUDA_HOME": 1, "CUDA_PATH": 2, "CUDA_ROOT": 3, "PATH": 4,
             "standard": 5, "CUDA_PATH_V": 5, "pypi": 6}
_ENV_VARS = ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT")

_RELEASE = re.compile(r"release (\d+)\.(\d+)(?:, V(\d+\.\d+(?:\.\d+)?))?")
_CODE = re.compile(r"^(?:sm|compute|lto)_\d{2,3}[af]?$")
_CUDA_H = re.compile(r"#define\s+CUDA_VERSION\s+(\d+)")


@dataclass(frozen=True, kw_only=True)
class Toolkit:
    """One CUDA toolkit found on the machine."""

    root: Path
    """The toolkit folder (holds bin/, include/)."""
    nvcc: Path | None
    """`bin/nvcc[.exe]` when it exists."""
    version: Version | None
    """Full version when nvcc says it (13.0.88), else major.minor from files; None = unknown."""
    version_source: VersionSource
    codes: tuple[str, ...]
    """What `nvcc --list-gpu-code` printed (sm_75 … sm_121); empty when unknown."""
    layout: Layout
    """`pypi`: a wheel tree (no lib64, no targets/, no libcudart.so on Linux); else `standard`."""
    dll_dirs: tuple[Path, ...]
    """Folders that exist and may hold the runtime libraries, in the platform's search order."""
    has_headers: bool
    """Whether include/cuda_runtime.h exists (nvcc without it = half-installed)."""
    host_config: Path | None
    """`include/crt/host_config.h`, which holds the accepted host-compiler window."""
    origins: tuple[str, ...]
    """Where it was found: `CUDA_HOME`, `PATH`, `standard`, `pypi`, `--cuda`, …"""
    problems: tuple[str, ...] = ()
    """Probe failures (timeouts, unparseable output)."""

    @property
    def release(self) -> Version | None:
        """major.minor (13.0), the unit every compatibility table speaks in."""
        if self.version is None:
            return None
        return Version(f"{self.version.major}.{self.version.minor}")

    @property
    def fingerprint(self) -> str:
        """Identity of this installation: changes when nvcc is replaced."""
        nvcc_fp = file_fingerprint(self.nvcc) if self.nvcc is not None else None
        return nvcc_fp or str(self.root)

    def can_emit(self, arch: Arch) -> bool | None:
        """Whether nvcc lists `sm_<code><suffix>`'s base (None when the list is unknown).
        nvcc lists only base codes; `a`/`f` variants exist for every listed code ≥ 90/100."""
        if not self.codes:
            return None
        return f"sm_{arch.code}" in self.codes

    def arch_problem(self, arch: Arch) -> ArchProblem | None:
        """Why this toolkit cannot compile `arch` (None: it can, as far as is known).
        `too-old`: older than the first CUDA for it (flashbuild.arch); `removed`: CUDA 13
        dropped it; `cannot-emit`: its nvcc does not list it."""
        release = self.release
        if release is not None and release < arch.first_cuda():
            return "too-old"
        removed = arch.removed_in()
        if release is not None and removed is not None and release >= removed:
            return "removed"
        if self.can_emit(arch) is False:
            return "cannot-emit"
        return None

    def compiles(self, targets: Sequence[Arch]) -> bool:
        return self.nvcc is not None and all(self.arch_problem(a) is None for a in targets)

    def described(self) -> str:
        """`CUDA 12.4 on PATH (/usr/local/cuda-12.4)`: which toolkit, in a user's words."""
        where = _WHERE[min(self.origins, key=lambda o: _PRIORITY[o])]
        return f"CUDA {self.release or '(version unknown)'} {where} ({self.root})"

    def to_json(self) -> dict[str, object]:
        return {
            "root": str(self.root),
            "nvcc": str(self.nvcc) if self.nvcc else None,
            "version": str(self.version) if self.version else None,
            "version_source": self.version_source,
            "codes": list(self.codes),
            "layout": self.layout,
            "dll_dirs": [str(d) for d in self.dll_dirs],
            "has_headers": self.has_headers,
            "host_config": str(self.host_config) if self.host_config else None,
            "origins": list(self.origins),
            "problems": list(self.problems),
        }


@dataclass(frozen=True)
class ToolkitSearch:
    """Every toolkit found, the one a build would use, and why."""

    candidates: tuple[Toolkit, ...]
    chosen: Toolkit | None
    reason: str
    """Completes "chosen because ..."."""
    disagreement: str | None = None
    """Set when CUDA_HOME/CUDA_PATH and the nvcc on PATH name different toolkits."""
    problems: tuple[str, ...] = field(default=())
    pypi_home: Path | None = None
    """Where `pip install cuda-toolkit[...]` puts a toolkit for this Python
    (`<its site-packages>/nvidia/cu13`): the literal path fixes name."""

    @property
    def summary(self) -> str:
        """One line: which toolkit and why (what `flashbuild build` says)."""
        if self.chosen is None:
            return f"no CUDA toolkit: {self.reason}"
        version = self.chosen.version or "(version unknown)"
        return f"CUDA {version} at {self.chosen.root}, chosen because {self.reason}"

    def able(self, targets: Sequence[Arch]) -> Toolkit | None:
        """The newest toolkit found, other than the chosen one, that compiles every target
        (of two of one version, this Python's PyPI one, as `choose` prefers it)."""
        fits = [t for t in self.candidates if t is not self.chosen and t.compiles(targets)]
        return max(fits, key=lambda t: (t.version or Version("0"), _origin(t) == "pypi"),
                   default=None)

    def to_json(self) -> dict[str, object]:
        return {
            "candidates": [t.to_json() for t in self.candidates],
            "chosen": str(self.chosen.root) if self.chosen else None,
            "reason": self.reason,
            "disagreement": self.disagreement,
            "problems": list(self.problems),
            "pypi_home": str(self.pypi_home) if self.pypi_home else None,
        }


# --- parsers (pure) ---------------------------------------------------------------------


def parse_nvcc_version(text: str) -> Version | None:
    """`Cuda compilation tools, release 13.0, V13.0.88` → 13.0.88 (None if absent)."""
    match = _RELEASE.search(text)
    if not match:
        return None
    try:
        return Version(match[3] or f"{match[1]}.{match[2]}")
    except InvalidVersion:
        return None


def parse_gpu_codes(text: str) -> tuple[str, ...]:
    """The `sm_XX` / `compute_XX` lines of `nvcc --list-gpu-code` (anything else ignored)."""
    return tuple(line.strip() for line in text.splitlines() if _CODE.match(line.strip()))


def version_from_files(root: Path) -> tuple[Version | None, VersionSource]:
    """Installer toolkits carry version.json; every toolkit has cuda.h's CUDA_VERSION."""
    try:
        data = json.loads((root / "version.json").read_text(encoding="utf-8"))
        text = data["cuda"]["version"]
        return Version(str(text)), "version.json"
    except (OSError, ValueError, KeyError, TypeError, InvalidVersion):
        pass
    for header in (root / "include" / "cuda.h", *root.glob("targets/*/include/cuda.h")):
        try:
            match = _CUDA_H.search(header.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
        if match:
            number = int(match[1])  # 13000 = 13.0, 12090 = 12.9
            return Version(f"{number // 1000}.{number % 1000 // 10}"), "cuda.h"
    return None, "unknown"


# --- filesystem facts -------------------------------------------------------------------


def _first_existing(paths: Sequence[Path]) -> Path | None:
    return next((p for p in paths if p.is_file()), None)


def _include_dirs(root: Path) -> list[Path]:
    return [root / "include", *sorted(root.glob("targets/*/include"))]


def _is_pypi_tree(root: Path) -> bool:
    # Wheels unpack to site-packages/nvidia/cu13 (13.x) or nvidia/cuda_nvcc (12.x).
    return root.parent.name == "nvidia" and bool(re.fullmatch(r"cu\d+|cuda_nvcc", root.name))


def _real(path: str | Path) -> str:
    return os.path.realpath(path)


def root_of_nvcc(nvcc: str | Path, runner: Runner, env: Mapping[str, str],
                 cache: ProbeCache = NO_CACHE) -> Path | None:
    """The toolkit root of an nvcc. A real nvcc has nvcc.profile beside its real path; a
    wrapper script (like /usr/local/bin/nvcc here) does not, so nvcc is asked where it lives
    (`--dryrun` prints `_HERE_=<bin folder>`; cached by the wrapper's fingerprint)."""
    real = Path(_real(nvcc))
    if (real.parent / "nvcc.profile").is_file():
        return real.parent.parent

    def ask() -> Path | None:
        try:
            done = runner.run([str(nvcc), "--dryrun", "-x", "cu", "-E", os.devnull], env=env,
                              timeout=NVCC_TIMEOUT, check=False)
        except FlashbuildError:
            return None
        match = re.search(r"^#\$ _HERE_=(.+)$", done.output, re.MULTILINE)
        return Path(match[1].strip()).parent if match else None

    return cache.fetch("nvcc-wrapper", file_fingerprint(real), ask,
                       encode=lambda p: str(p) if p is not None else None,
                       decode=lambda v: Path(v) if isinstance(v, str) and Path(v).is_dir()
                       else None)


# --- probing ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _NvccAnswer:
    version: Version | None
    codes: tuple[str, ...]
    problems: tuple[str, ...]


def _ask_nvcc(nvcc: Path, runner: Runner, env: Mapping[str, str]) -> _NvccAnswer:
    problems: list[str] = []
    version: Version | None = None
    codes: tuple[str, ...] = ()
    try:
        done = runner.run([str(nvcc), "--version"], env=env, timeout=NVCC_TIMEOUT, check=False)
        version = parse_nvcc_version(done.output)
        if version is None:
            problems.append(f"`{nvcc} --version` printed no release number: "
                            f"{done.output.strip()[:200]!r}")
    except FlashbuildError as exc:
        problems.append(f"`{nvcc} --version` failed: {exc.what}")
    try:
        done = runner.run([str(nvcc), "--list-gpu-code"], env=env, timeout=NVCC_TIMEOUT,
                          check=False)
        codes = parse_gpu_codes(done.output)
        if not codes:
            problems.append(f"`{nvcc} --list-gpu-code` listed no GPU codes: "
                            f"{done.output.strip()[:200]!r}")
    except FlashbuildError as exc:
        problems.append(f"`{nvcc} --list-gpu-code` failed: {exc.what}")
    return _NvccAnswer(version, codes, tuple(problems))


def _encode_answer(answer: _NvccAnswer) -> object | None:
    if answer.problems or answer.version is None:
        return None  # never cache a failure
    return {"version": str(answer.version), "codes": list(answer.codes)}


def _decode_answer(value: object) -> _NvccAnswer | None:
    if not isinstance(value, dict):
        return None
    try:
        return _NvccAnswer(Version(str(value["version"])),
                           tuple(str(c) for c in value["codes"]), ())
    except (KeyError, TypeError, InvalidVersion):
        return None


def probe_toolkit(root: Path, origins: Sequence[str], *, runner: Runner,
                  env: Mapping[str, str], platform: Platform,
                  cache: ProbeCache = NO_CACHE) -> Toolkit:
    """Everything about one toolkit folder. Never raises."""
    nvcc = root / "bin" / platform.exe("nvcc")
    nvcc_path = nvcc if nvcc.is_file() else None
    problems: list[str] = []
    version: Version | None = None
    source: VersionSource = "unknown"
    codes: tuple[str, ...] = ()
    if nvcc_path is not None:
        answer = cache.fetch(
            "nvcc", file_fingerprint(nvcc_path),
            lambda: _ask_nvcc(nvcc_path, runner, env),
            encode=_encode_answer, decode=_decode_answer)
        problems += answer.problems
        codes = answer.codes
        if answer.version is not None:
            version, source = answer.version, "nvcc"
    if version is None:
        version, source = version_from_files(root)
    includes = _include_dirs(root)
    dll_dirs = tuple(Path(str(d)) for d in platform.toolkit_dll_dirs(PurePath(root))
                     if Path(str(d)).is_dir())
    return Toolkit(
        root=root,
        nvcc=nvcc_path,
        version=version,
        version_source=source,
        codes=codes,
        layout="pypi" if _is_pypi_tree(root) else "standard",
        dll_dirs=dll_dirs,
        has_headers=_first_existing([d / "cuda_runtime.h" for d in includes]) is not None,
        host_config=_first_existing([d / "crt" / "host_config.h" for d in includes]),
        origins=tuple(origins),
        problems=tuple(problems),
    )


def _looks_like_toolkit(root: Path, platform: Platform) -> bool:
    return (root / "bin" / platform.exe("nvcc")).is_file() or (root / "include").is_dir()


class _Candidates:
    """Ordered {real path: (root, origins)}: one entry per installation, however reached."""

    def __init__(self) -> None:
        self.found: dict[str, tuple[Path, list[str]]] = {}
        self.on_path: str | None = None
        self.problems: list[str] = []

    def add(self, root: Path, origin: str) -> None:
        key = _real(root)
        if key in self.found:
            if origin not in self.found[key][1]:
                self.found[key][1].append(origin)
        else:
            self.found[key] = (root, [origin])


def _from_explicit(c: _Candidates, explicit: Path, runner: Runner,
                   env: Mapping[str, str], platform: Platform | None = None) -> None:
    """`--cuda`: a toolkit root or its nvcc. Anything else is an error, never a silent fall
    back to another toolkit (build and doctor would then use one the user did not name)."""
    # Absolute from here on: the root ends up in the manifest and in the loader shim, which
    # drops relative folders (they would mean the importing process's current directory).
    explicit = explicit.absolute()
    root = root_of_nvcc(explicit, runner, env) if explicit.is_file() else explicit
    names = (platform.exe("nvcc"),) if platform is not None else ("nvcc", "nvcc.exe")
    if root is None or not root.is_dir() or not (
            any((root / "bin" / n).is_file() for n in names)
            or (root / "include" / "cuda.h").is_file()):
        what = ("does not exist" if not explicit.exists() else
                "is a file that is not nvcc" if explicit.is_file() else
                "is a folder without bin/nvcc or include/cuda.h")
        raise UsageError(
            f"--cuda {explicit} is not a CUDA toolkit",
            evidence=f"it {what}",
            fix="pass the toolkit's root folder (the one holding bin/nvcc) or its nvcc, or "
            "leave --cuda out to use the toolkit `flashbuild doctor` chooses")
    c.add(root, "--cuda")


def _from_env(c: _Candidates, env: Mapping[str, str]) -> None:
    for var in _ENV_VARS:
        value = env.get(var)
        if not value:
            continue
        if Path(value).is_dir():
            c.add(Path(value), var)
        else:
            c.problems.append(f"{var}={value} does not exist")
    for var in sorted(k for k in env if k.startswith("CUDA_PATH_V")):
        if Path(env[var]).is_dir():
            c.add(Path(env[var]), "CUDA_PATH_V")


def _from_path(c: _Candidates, runner: Runner, env: Mapping[str, str],
               platform: Platform, cache: ProbeCache) -> None:
    nvcc = runner.which(platform.exe("nvcc"), env)
    if nvcc is None:
        return
    root = root_of_nvcc(nvcc, runner, env, cache)
    if root is None:
        c.problems.append(f"nvcc on PATH ({nvcc}) is not inside a toolkit folder")
        return
    c.add(root, "PATH")
    c.on_path = _real(root)


def _from_standard(c: _Candidates, env: Mapping[str, str], platform: Platform) -> None:
    for pattern in platform.standard_toolkit_roots(env):
        base = Path(pattern)
        matches = sorted(base.parent.glob(base.name)) if "*" in base.name else [base]
        for match in matches:
            if match.is_dir() and _looks_like_toolkit(match, platform):
                c.add(match, "standard")


def _from_pypi(c: _Candidates, site_packages: Sequence[Path], platform: Platform) -> None:
    for sp in site_packages:
        for major in (13, 12):
            root = Path(str(platform.pypi_cuda_root(PurePath(sp), major)))
            if root.is_dir() and _looks_like_toolkit(root, platform):
                c.add(root, "pypi")
        legacy = sp / "nvidia" / "cuda_nvcc"
        if (legacy / "bin" / platform.exe("nvcc")).is_file():
            c.add(legacy, "pypi")


def _rank(toolkit: Toolkit) -> tuple[int, int, tuple[int, ...]]:
    best = min(_PRIORITY[o] for o in toolkit.origins)
    usable = 0 if toolkit.nvcc is not None or "--cuda" in toolkit.origins else 1
    newest = tuple(-p for p in toolkit.version.release) if toolkit.version else (1,)
    return (usable, best, newest)


#: Why a toolkit was chosen: each completes "chosen because ...".
_WHY = {
    "--cuda": "it was named with --cuda",
    "CUDA_HOME": "CUDA_HOME points at it (build tools read CUDA_HOME first)",
    "CUDA_PATH": "CUDA_PATH points at it",
    "CUDA_ROOT": "CUDA_ROOT points at it",
    "PATH": "its nvcc is the first on PATH",
    "standard": "it is the newest toolkit in the standard install folders",
    "CUDA_PATH_V": "it is the newest toolkit the CUDA installer registered",
    "pypi": "it is the PyPI CUDA toolkit of this Python, and no other toolkit was found",
}

#: Where a toolkit was found, in a user's words (`CUDA 12.4 on PATH`).
_WHERE = {
    "--cuda": "named with --cuda", "CUDA_HOME": "from CUDA_HOME", "CUDA_PATH": "from CUDA_PATH",
    "CUDA_ROOT": "from CUDA_ROOT", "PATH": "on PATH", "standard": "in a standard folder",
    "CUDA_PATH_V": "registered by the CUDA installer", "pypi": "from PyPI in this Python",
}

#: Origins that are the user's own choice: respected even when the toolkit cannot compile the
#: target (doctor's toolkit rules then name a found toolkit that can).
_NAMED = frozenset({"--cuda", *_ENV_VARS})


def _origin(toolkit: Toolkit) -> str:
    return min(toolkit.origins, key=lambda o: _PRIORITY[o])


def choose(candidates: Sequence[Toolkit], targets: Sequence[Arch] = ()) -> tuple[
        Toolkit | None, str]:
    """The toolkit a build uses for `targets`, and why (completes "chosen because ...").
    `flashbuild doctor` and `flashbuild build` both choose here.

    A toolkit the user named (--cuda, CUDA_HOME, CUDA_PATH, CUDA_ROOT) is used as named.
    Otherwise: this Python's PyPI toolkit (what `pip install -e .[cuda]` installed) goes
    before a toolkit of an older release found on PATH or in the install folders, and before
    one of the same release that lacks library headers it has (`_TORCH_HEADERS`: torch's own
    CUDA headers include them, and a CUDA torch's cuSPARSE/cuBLAS wheels put them into the
    PyPI toolkit's folder, while a system toolkit installed without those libraries has
    none: every torch extension then stops at `cusparse.h`); then the
    first, in that order, that can compile every target (flashbuild.arch knows which CUDA
    first compiles which arch); none can: the first, and doctor's rules say why."""
    ranked = sorted((t for t in candidates if _rank(t)[0] == 0), key=_rank)
    if not ranked:
        return None, ("no toolkit with nvcc was found" if not candidates else
                      "toolkits were found but none has bin/nvcc")
    first = ranked[0]
    if _origin(first) in _NAMED:
        return first, _WHY[_origin(first)]
    venv = next((t for t in ranked if _origin(t) == "pypi"), None)
    order = ranked
    if (venv is not None and venv is not first and venv.release is not None
            and (first.release is None or venv.release > first.release or (
                venv.release == first.release and _headers(venv) > _headers(first)))):
        order = [venv, *(t for t in ranked if t is not venv)]
    top = order[0]
    if targets and not first.compiles(targets):
        fit = next((t for t in order if t.compiles(targets)), None)
        if fit is not None:
            names = ", ".join(a.sm for a in targets if first.arch_problem(a) is not None)
            own = ("it is this Python's own PyPI toolkit and " if _origin(fit) == "pypi"
                   else "it ")
            return fit, f"{own}can compile {names}, which {first.described()} cannot"
    if top is venv and venv is not first:
        if venv.release == first.release:
            missing = ", ".join(sorted(_headers(venv) - _headers(first)))
            return venv, (f"it is this Python's own PyPI toolkit and has {missing}, which "
                          f"torch's CUDA headers include and {first.described()} lacks")
        return venv, (f"it is this Python's own PyPI toolkit, newer than "
                      f"{first.described()}")
    return top, _WHY[_origin(top)]


#: Library headers torch's ATen/cuda headers include (CUDAContextLight.h): a toolkit without
#: them compiles no torch extension that includes ATen/cuda/CUDAContext.h.
_TORCH_HEADERS = ("cusparse.h", "cublas_v2.h", "cublasLt.h", "cusolverDn.h")


def _headers(t: Toolkit) -> frozenset[str]:
    """Which of `_TORCH_HEADERS` the toolkit's include folder holds."""
    return frozenset(h for h in _TORCH_HEADERS if (t.root / "include" / h).is_file())


def choose_for(search: ToolkitSearch, targets: Sequence[Arch]) -> ToolkitSearch:
    """`search` with its choice made for `targets` (doctor knows them once the GPUs are in)."""
    chosen, reason = choose(search.candidates, targets)
    return replace(search, chosen=chosen, reason=reason)


def python_site_packages() -> tuple[Path, ...]:
    """Where this Python's PyPI CUDA toolkit may be: purelib first (where `python -m pip
    install` puts it, so `ToolkitSearch.pypi_home` names that folder), then platlib and
    site.getsitepackages(). doctor and build both search these."""
    paths = sysconfig.get_paths()
    return tuple(dict.fromkeys(
        [Path(paths["purelib"]), Path(paths["platlib"]),
         *(Path(p) for p in site.getsitepackages())]))


def find_toolkits(env: Mapping[str, str], runner: Runner, platform: Platform, *,
                  explicit: Path | None = None, site_packages: Sequence[Path] = (),
                  cache: ProbeCache = NO_CACHE, targets: Sequence[Arch] = ()) -> ToolkitSearch:
    """Find, probe and choose (`choose`) for `targets`. Candidates: --cuda, CUDA_HOME /
    CUDA_PATH / CUDA_ROOT, the nvcc on PATH, the standard install folders, this Python's
    PyPI toolkit."""
    c = _Candidates()
    if explicit is not None:
        _from_explicit(c, explicit, runner, env, platform)
    _from_env(c, env)
    _from_path(c, runner, env, platform, cache)
    _from_standard(c, env, platform)
    _from_pypi(c, site_packages, platform)
    found, on_path, problems = c.found, c.on_path, c.problems
    with ThreadPoolExecutor(max_workers=max(1, min(4, len(found)))) as pool:
        toolkits = list(pool.map(
            lambda item: probe_toolkit(item[0], item[1], runner=runner, env=env,
                                       platform=platform, cache=cache),
            found.values()))
    chosen, reason = choose(toolkits, targets)
    disagreement = None
    for var in ("CUDA_HOME", "CUDA_PATH"):
        value = env.get(var)
        if value and on_path is not None and _real(Path(value)) != on_path:
            disagreement = (f"{var}={value} but the nvcc on PATH belongs to {on_path}: "
                            "tools that read " + var + " and tools that run `nvcc` will use "
                            "different toolkits")
            break
    pypi_home = (Path(str(platform.pypi_cuda_root(PurePath(site_packages[0]), 13)))
                 if site_packages else None)
    return ToolkitSearch(tuple(toolkits), chosen, reason, disagreement, tuple(problems),
                         pypi_home)
