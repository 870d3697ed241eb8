"""Install the built binaries where Python imports them, with the loader shim and manifest.

Modes:
- `wheel` (default for the bundled kernels): a wheel of the package with the fresh binaries,
  installed with `python -m pip install --force-reinstall --no-deps` into the target
  interpreter's environment, so `pip uninstall <package>` removes it again.
- `inplace`: the binaries next to the package's Python files in the source tree, as the
  playbooks do (`python -c "import pkg"` works with the tree on sys.path).
- `none`: build only.

Nothing is replaced until every check has passed: a read-only target is an InstallError
before the first file moves, and a failed build never reaches this module, so the previous
install stays intact. An unchanged re-run (same binaries, same shim data, same manifest,
target still there) installs nothing, which keeps the no-op rebuild well under a second.

"Target still there" means the installed files hold the bytes this build folder installed,
not only that they exist: each build folder (one per arch) keeps its own stamp, and another
arch's install writes the same paths. So the stamp records every installed file's size,
mtime and SHA-256; a file whose size or mtime moved is hashed, and a different hash means
another build is installed, which is replaced (`build --arch sm120`, `--arch sm_100`,
`--arch sm120` leaves the sm120 build installed).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from flashbuild import platforms
from flashbuild.errors import InstallError, UsageError
from flashbuild.installing import shim
from flashbuild.installing.wheel import build_wheel, read_member, repack_wheel
from flashbuild.proc import Runner, quote, tail

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from flashbuild.platforms.base import Platform

InstallMode = Literal["wheel", "inplace", "none"]
ArtifactKind = Literal["module", "plugin"]
INSTALL_STAMP = "flashbuild-install.json"
_MODES: dict[str, InstallMode] = {"wheel": "wheel", "inplace": "inplace", "none": "none"}


def parse_install_mode(text: str) -> InstallMode:
    mode = _MODES.get(text.strip().lower())
    if mode is None:
        raise UsageError(f"`--install {text}` is not an install mode",
                         fix="use wheel (pip-installable, the default), inplace or none")
    return mode


@dataclass(frozen=True)
class BuiltArtifact:
    """One binary the build produced."""

    path: Path
    kind: ArtifactKind
    name: str
    """The recipe's artifact name (`_C`, `flashkern_attn`); for a setup.py build the module's
    dotted name (`causal_conv1d_cuda`, `pkg._C`)."""
    relpath: str = ""
    """Where the module sits below the import root (`pkg/_C.cpython-311-x86_64-linux-gnu.so`),
    for a build that decides that itself (setuptools); empty = in the package folder."""


@dataclass(frozen=True, kw_only=True)
class InstallPlan:
    mode: InstallMode
    package: str
    """Import name (`flashkern`)."""
    package_dir: Path
    """The package's folder in the source tree (its Python files)."""
    artifacts: tuple[BuiltArtifact, ...]
    dll_dirs: tuple[str, ...]
    """Rendered into the loader shim (absolute, existing folders)."""
    manifest_name: str
    manifest: bytes
    """The manifest file's content, written beside the module."""
    python: str
    """The interpreter whose environment a wheel is installed into."""
    distribution: str = ""
    """Distribution name of the wheel (default: the package name)."""
    version: str = "0.0.0"
    work_dir: Path
    """Where the wheel is built and the install stamp is kept (the build folder)."""
    prebuilt: Path | None = None
    """A wheel the build produced itself (setuptools): installed with the shim and the
    manifest added, instead of a wheel made from `package_dir`."""


@dataclass(frozen=True)
class InstallResult:
    mode: InstallMode
    location: Path | None
    """The installed package folder (None for `none`)."""
    files: tuple[Path, ...] = ()
    wheel: Path | None = None
    skipped: bool = False
    """True when the same install was already in place (nothing written)."""
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, object]:
        return {"mode": self.mode, "location": str(self.location) if self.location else None,
                "files": [str(f) for f in self.files],
                "wheel": str(self.wheel) if self.wheel else None, "skipped": self.skipped,
                "notes": list(self.notes)}


def install(plan: InstallPlan, runner: Runner, env: Mapping[str, str]) -> InstallResult:
    if plan.mode == "none":
        return InstallResult("none", None, notes=("--install none: nothing installed",))
    digest = _plan_digest(plan)
    previous = _read_stamp(plan.work_dir)
    notes: tuple[str, ...] = ()
    if previous is not None and previous.get("digest") == digest:
        files, replaced = _still_installed(previous)
        if files and not replaced:
            location = Path(str(previous["location"]))
            return InstallResult(plan.mode, location, files, skipped=True,
                                 notes=("unchanged: already installed",))
        if replaced:
            notes = (f"reinstalled: {', '.join(replaced[:3])}"
                     f"{' …' if len(replaced) > 3 else ''} held another build since this one "
                     "was installed",)
    result = _install_inplace(plan) if plan.mode == "inplace" else _install_wheel(plan, runner, env)
    _write_stamp(plan.work_dir, digest, result)
    return dataclasses.replace(result, notes=(*result.notes, *notes)) if notes else result


# --- inplace -----------------------------------------------------------------------------

def _install_inplace(plan: InstallPlan) -> InstallResult:
    target = plan.package_dir
    root = import_root(plan.package_dir, plan.package)
    destinations = [root / a.relpath if a.relpath else target / a.path.name
                    for a in plan.artifacts]
    planned = [*destinations, target / f"{shim.SHIM_MODULE}.py", target / "__init__.py",
               target / plan.manifest_name]
    check_writable(target, planned)
    files: list[Path] = []
    for artifact, dest in zip(plan.artifacts, destinations, strict=True):
        _copy_atomic(artifact.path, dest)
        files.append(dest)
    files.append(shim.install_shim(target, plan.dll_dirs, package=plan.package))
    manifest = target / plan.manifest_name
    _write_bytes_atomic(manifest, plan.manifest)
    files.append(manifest)
    return InstallResult("inplace", target, tuple(files))


def import_root(package_dir: Path, package: str) -> Path:
    """The folder `import <package>` resolves from: `package_dir` up one level per name."""
    root = package_dir
    for _ in package.split("."):
        root = root.parent
    return root


def check_writable(folder: Path, files: Sequence[Path], *,
                   platform: Platform | None = None) -> None:
    """Raise InstallError, before anything is replaced, when the folder or a file that would
    be replaced cannot be written (by the rules of `platform`, default this machine's)."""
    plat = platform or platforms.current()
    problems = []
    if not folder.is_dir():
        problems.append(f"{folder} does not exist")
    elif not plat.writable(folder):
        problems.append(f"{folder} is not writable")
    problems += [f"{f} is read-only" for f in files if f.exists() and not plat.writable(f)]
    if problems:
        raise InstallError(
            "the install target cannot be written; nothing was replaced",
            evidence="; ".join(problems),
            fix="make the folder writable, install elsewhere (`--install wheel` into a venv "
            "you own), or use `--install none` and copy the files from the build folder",
            details={"problems": problems},
        )


def _copy_atomic(src: Path, dest: Path) -> None:
    tmp = dest.with_name(dest.name + ".flashbuild-tmp")
    shutil.copy2(src, tmp)
    try:
        tmp.replace(dest)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        # On Windows a loaded .pyd cannot be replaced.
        raise InstallError(
            f"{dest.name} could not be replaced",
            evidence=str(exc),
            fix="close every Python process that imported the package and run again",
        ) from exc


def _write_bytes_atomic(dest: Path, data: bytes) -> None:
    if dest.is_file() and dest.read_bytes() == data:
        return
    tmp = dest.with_name(dest.name + ".flashbuild-tmp")
    tmp.write_bytes(data)
    tmp.replace(dest)


# --- wheel -------------------------------------------------------------------------------

def _install_wheel(plan: InstallPlan, runner: Runner, env: Mapping[str, str]) -> InstallResult:
    platlib = _platlib(plan.python, runner, env)
    location = platlib.joinpath(*plan.package.split("."))
    installed = [platlib / a.relpath if a.relpath else location / a.path.name
                 for a in plan.artifacts]
    planned = [f for f in installed if f.parent.is_dir()]
    check_writable(platlib, planned)
    if plan.prebuilt is not None:
        arcname = plan.package.replace(".", "/") + "/__init__.py"
        raw = read_member(plan.prebuilt, arcname)
        added = {"__init__.py": shim.insert(raw.decode("utf-8") if raw else "").encode("utf-8"),
                 f"{shim.SHIM_MODULE}.py": shim.render(plan.dll_dirs,
                                                       package=plan.package).encode("utf-8"),
                 plan.manifest_name: plan.manifest}
        wheel = repack_wheel(plan.prebuilt, package=plan.package, extra=added,
                             out_dir=plan.work_dir / "dist")
    else:
        init = plan.package_dir / "__init__.py"
        init_text = init.read_bytes().decode("utf-8") if init.is_file() else ""
        extra: dict[str, Path | bytes] = {a.path.name: a.path for a in plan.artifacts}
        extra["__init__.py"] = shim.insert(init_text).encode("utf-8")
        extra[f"{shim.SHIM_MODULE}.py"] = shim.render(plan.dll_dirs,
                                                      package=plan.package).encode("utf-8")
        extra[plan.manifest_name] = plan.manifest
        wheel = build_wheel(distribution=plan.distribution or plan.package,
                            version=plan.version, package=plan.package,
                            package_dir=plan.package_dir, extra=extra,
                            out_dir=plan.work_dir / "dist")
    argv = [plan.python, "-m", "pip", "install", "--force-reinstall", "--no-deps",
            "--no-input", "--disable-pip-version-check", "--quiet", str(wheel)]
    done = runner.run(argv, env=env, timeout=600, check=False)
    if not done.ok:
        raise InstallError(
            f"pip could not install {wheel.name}",
            evidence=f"command: {quote(argv)}\n{tail(done.output)}",
            fix="read pip's message; the wheel is kept at the path above and the previous "
            "install is unchanged unless pip reported otherwise",
            details={"wheel": str(wheel)},
        )
    files = (*installed, *(location / name for name in (f"{shim.SHIM_MODULE}.py",
                                                        plan.manifest_name)))
    return InstallResult("wheel", location, files, wheel=wheel)


def _platlib(python: str, runner: Runner, env: Mapping[str, str]) -> Path:
    done = runner.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"],
                      env=env, timeout=60)
    return Path(done.stdout.strip().splitlines()[-1])


# --- the stamp that makes an unchanged re-run install nothing ------------------------------

def _plan_digest(plan: InstallPlan) -> str:
    h = hashlib.sha256()
    h.update(json.dumps([plan.mode, plan.package, str(plan.package_dir), plan.python,
                         plan.version, list(plan.dll_dirs), plan.manifest_name]).encode())
    h.update(plan.manifest)
    for artifact in plan.artifacts:
        st = artifact.path.stat()
        h.update(f"{artifact.path}:{artifact.relpath}:{st.st_size}:{st.st_mtime_ns}".encode())
    if plan.prebuilt is not None:
        st = plan.prebuilt.stat()
        h.update(f"{plan.prebuilt}:{st.st_size}:{st.st_mtime_ns}".encode())
    init = plan.package_dir / "__init__.py"
    if plan.mode == "wheel" and init.is_file():
        h.update(init.read_bytes())
    return h.hexdigest()


def _read_stamp(work_dir: Path) -> dict[str, object] | None:
    try:
        data = json.loads((work_dir / INSTALL_STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_stamp(work_dir: Path, digest: str, result: InstallResult) -> None:
    payload = {"digest": digest, "location": str(result.location),
               "files": [_file_state(f) for f in result.files]}
    _write_bytes_atomic(work_dir / INSTALL_STAMP, json.dumps(payload, indent=1).encode())


def _file_state(path: Path) -> dict[str, object]:
    try:
        st = path.stat()
        return {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                "sha256": _sha256(path)}
    except OSError:  # not where pip was expected to put it: the next run installs again
        return {"path": str(path)}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _still_installed(stamp: Mapping[str, object]) -> tuple[tuple[Path, ...], list[str]]:
    """The files the stamp lists, and the names of those that no longer hold what this build
    folder installed (missing, or other bytes). A file whose size and mtime are as recorded is
    taken as unchanged without reading it (the no-op stays cheap); any other is hashed. A stamp
    from before content was recorded (plain paths) counts as replaced, so it is rewritten."""
    raw = stamp.get("files")
    if not isinstance(raw, list):
        return (), []
    files: list[Path] = []
    replaced: list[str] = []
    for entry in raw:
        if not isinstance(entry, dict):
            path = Path(str(entry))
            files.append(path)
            replaced.append(path.name)
            continue
        path = Path(str(entry.get("path")))
        files.append(path)
        try:
            st = path.stat()
            same = (st.st_size == entry.get("size") and st.st_mtime_ns == entry.get("mtime_ns")
                    ) or (st.st_size == entry.get("size") and _sha256(path) == entry.get("sha256"))
        except OSError:
            same = False
        if not same:
            replaced.append(path.name)
    return tuple(files), replaced


def ext_suffix(python: str, runner: Runner, env: Mapping[str, str]) -> str:
    """The extension suffix of the interpreter the module is built for (CMake's FindPython
    reads the same value); this interpreter's needs no process."""
    if python == sys.executable or Path(python).resolve() == Path(sys.executable).resolve():
        return str(sysconfig.get_config_var("EXT_SUFFIX"))
    done = runner.run([python, "-c", "import sysconfig; print(sysconfig.get_config_var("
                       "'EXT_SUFFIX'))"], env=env, timeout=60)
    return done.stdout.strip().splitlines()[-1]
