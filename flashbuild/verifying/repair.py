"""`flashbuild repair`: tag a Linux wheel with the manylinux policy its binaries fit, and
bundle nothing.

`auditwheel repair` can leave torch, the CUDA runtime and the driver out (`--exclude`, which
takes wildcards: pypa/auditwheel, src/auditwheel/main_repair.py), but it grafts every other
external library it finds into the wheel without asking, needs patchelf, and judges the
symbol versions with a second policy table. A CUDA extension's wheel needs no grafting: its
binaries link torch (provided by the torch the user installs), the CUDA libraries (provided by
the nvidia-* wheels torch depends on, or the driver), and the system libraries every
manylinux policy allows. So flashbuild only checks and retags:

- every ELF binary's GLIBC_/GLIBCXX_/CXXABI_ versions fit the policy (`abi.violations`, the
  table verify uses); one newer is a refusal naming it;
- every library a binary needs is in the wheel, a system library the policy allows
  (`abi.system_libraries`), one that must never be bundled (`abi.NEVER_BUNDLED`: torch, CUDA,
  the driver) or one the caller excludes (`--exclude`); any other is a refusal naming it,
  never a silent bundle;
- then the wheel is rewritten with the policy's platform tag in its file name and its
  `WHEEL` file's `Tag:` lines; `wheel.wheelfile.WheelFile` writes a fresh RECORD.

A Windows wheel (`win_amd64`) has no policy tag to earn; the same never-bundle rule applies to
its DLLs (what delvewheel would need as an --exclude each): every `.pyd`/`.dll` import
(read with pefile) must be inside the wheel, a DLL every Windows machine and Python provide
(`abi.windows_provided`), one of torch's, the CUDA wheels' or the driver's
(`abi.NEVER_BUNDLED_DLLS`) or `--exclude`d; any other is a refusal naming it ("DLL load failed"
on the user's machine otherwise). The wheel is then copied unchanged.
"""

from __future__ import annotations

import fnmatch
import re
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from wheel.wheelfile import WheelFile

from flashbuild import platforms
from flashbuild.errors import UsageError, VerifyError
from flashbuild.verifying import abi

if TYPE_CHECKING:
    from collections.abc import Sequence

_ELF_MAGIC = b"\x7fELF"
_PE_MAGIC = b"MZ"
_WINDOWS_PLATFORM = re.compile(r"^win_(?:amd64|arm64)$")
_LINUX_PLATFORM = re.compile(r"^(?:linux|manylinux_\d+_\d+|manylinux\d+)_(?P<arch>x86_64|"
                             r"aarch64|ppc64le|s390x|i686)$")


@dataclass(frozen=True, kw_only=True)
class Repaired:
    """What `repair_wheel` wrote."""

    source: Path
    """The wheel it read."""
    wheel: Path
    """The retagged wheel."""
    platform: str
    """Its platform tag (`manylinux_2_28_x86_64`)."""
    left_out: tuple[str, ...]
    """Libraries the binaries need that stay outside the wheel on purpose (torch, CUDA, the
    driver, `--exclude`), sorted."""


def _platforms(wheel: Path) -> set[str]:
    try:
        _name, _version, _build, tags = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename as exc:
        raise UsageError(f"{wheel.name} is not a wheel file name", evidence=str(exc),
                         fix="pass the .whl that `flashbuild build` wrote") from exc
    return {t.platform for t in tags}


def _arch(wheel: Path) -> str:
    _name, _version, _build, tags = parse_wheel_filename(wheel.name)
    found = {m["arch"] for t in tags if (m := _LINUX_PLATFORM.match(t.platform))}
    if len(found) != 1 or any(not _LINUX_PLATFORM.match(t.platform) for t in tags):
        raise UsageError(
            f"{wheel.name} is not a Linux platform wheel",
            evidence=f"its platform tags: {', '.join(sorted({t.platform for t in tags}))}",
            fix="repair tags Linux wheels (`linux_x86_64`) and checks Windows ones "
            "(`win_amd64`); a pure wheel needs neither")
    return found.pop()


def _is_library_name(name: str) -> bool:
    base = PurePosixPath(name).name
    return base.endswith(".so") or ".so." in base


def repair_wheel(wheel: Path, *, policy: str, out_dir: Path,
                 exclude: Sequence[str] = ()) -> Repaired:
    """Write `wheel` retagged for `policy` (`manylinux_2_28`) into `out_dir`, or raise a
    VerifyError naming each symbol version or library that forbids it."""
    tags = _platforms(wheel)
    rules = abi.policy_named(policy)
    if len(tags) == 1 and _WINDOWS_PLATFORM.match(next(iter(tags))):
        return _check_windows(wheel, tags.pop(), out_dir, exclude)
    arch = _arch(wheel)
    platform = f"{rules.name}_{arch}"
    archive = _open(wheel)
    too_new: list[str] = []
    unresolved: list[str] = []
    left_out: set[str] = set()
    with archive, tempfile.TemporaryDirectory(prefix="flashbuild-repair-") as tmp:
        names = [i.filename for i in archive.infolist() if not i.is_dir()]
        inside = {PurePosixPath(n).name for n in names}
        system = abi.system_libraries(rules)
        for index, name in enumerate(n for n in names if _is_library_name(n)):
            data = archive.read(name)
            if not data.startswith(_ELF_MAGIC):
                continue
            # One file per binary, under its own name (the messages name it).
            path = Path(tmp) / str(index) / PurePosixPath(name).name
            path.parent.mkdir()
            path.write_bytes(data)
            too_new += abi.violations(path, rules)
            for soname in abi.needed_libraries(path):
                if soname in inside or soname in system:
                    continue
                if any(fnmatch.fnmatchcase(soname, p) for p in (*abi.NEVER_BUNDLED, *exclude)):
                    left_out.add(soname)
                else:
                    unresolved.append(f"{name} needs {soname}")
        if too_new:
            raise VerifyError(
                f"{wheel.name} cannot be tagged {platform}: its binaries need newer symbol "
                "versions than the policy allows",
                evidence="; ".join(too_new[:5]) + (f" and {len(too_new) - 5} more"
                                                   if len(too_new) > 5 else ""),
                fix=f"build it in the {rules.name} image (`flashbuild ci init`'s default "
                "Linux legs), whose glibc and libstdc++ are the policy's, or repair to a "
                "newer policy (--policy) that allows these versions")
        _refuse_unresolved(wheel, unresolved, "SONAME")
        out = _retag(wheel, archive, names, platform, out_dir)
    return Repaired(source=wheel, wheel=out, platform=platform, left_out=tuple(sorted(left_out)))


def _open(wheel: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise VerifyError(f"{wheel.name} is not a readable wheel", evidence=str(exc),
                          fix="build it again") from exc


def _refuse_unresolved(wheel: Path, unresolved: list[str], what: str) -> None:
    if not unresolved:
        return
    raise VerifyError(
        f"{wheel.name} needs libraries that are neither inside it nor provided by the "
        "system, torch, the CUDA wheels or the driver; flashbuild repair bundles none",
        evidence="; ".join(unresolved[:5]) + (f" and {len(unresolved) - 5} more"
                                              if len(unresolved) > 5 else ""),
        fix="link it statically or ship it inside the package (the tree's build), or "
        f"pass --exclude {what} when a requirement of the wheel provides it at run time")


def _check_windows(wheel: Path, platform: str, out_dir: Path,
                   exclude: Sequence[str]) -> Repaired:
    """The never-bundle rule for a Windows wheel's DLL imports (module docstring); the wheel
    is copied to `out_dir` unchanged."""
    unresolved: list[str] = []
    left_out: set[str] = set()
    patterns = (*abi.NEVER_BUNDLED_DLLS, *(e.lower() for e in exclude))
    with _open(wheel) as archive, tempfile.TemporaryDirectory(prefix="flashbuild-repair-") as tmp:
        names = [i.filename for i in archive.infolist() if not i.is_dir()]
        inside = {PurePosixPath(n).name.lower() for n in names}
        binaries = [n for n in names if n.lower().endswith((".pyd", ".dll"))]
        for index, name in enumerate(binaries):
            data = archive.read(name)
            if not data.startswith(_PE_MAGIC):
                continue
            path = Path(tmp) / str(index) / PurePosixPath(name).name
            path.parent.mkdir()
            path.write_bytes(data)
            for dll in abi.pe_imports(path):
                if dll in inside or abi.windows_provided(dll):
                    continue
                if any(fnmatch.fnmatchcase(dll, p) for p in patterns):
                    left_out.add(dll)
                else:
                    unresolved.append(f"{name} imports {dll}")
    _refuse_unresolved(wheel, unresolved, "NAME.dll")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / wheel.name
    if target.resolve() != wheel.resolve():
        staging = target.with_name(f".{target.name}.flashbuild-tmp")
        try:
            shutil.copyfile(wheel, staging)
            platforms.current().replace(staging, target)
        finally:
            staging.unlink(missing_ok=True)
    return Repaired(source=wheel, wheel=target, platform=platform,
                    left_out=tuple(sorted(left_out)))


def _retag(wheel: Path, archive: zipfile.ZipFile, names: list[str], platform: str,
           out_dir: Path) -> Path:
    """A copy of the wheel with `platform` as its platform tag (file name and WHEEL's `Tag:`
    lines); RECORD rewritten by WheelFile."""
    stem, _plat = wheel.name.removesuffix(".whl").rsplit("-", 1)
    target = out_dir / f"{stem}-{platform}.whl"
    info = {n.split("/", 1)[0] for n in names if n.endswith(".dist-info/WHEEL")}
    if len(info) != 1:
        raise VerifyError(f"{wheel.name} has {len(info)} .dist-info/WHEEL files, not one",
                          fix="rebuild the wheel")
    dist_info = info.pop()
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".repair-", dir=out_dir))
    tmp = staging / target.name
    try:
        with WheelFile(tmp, "w") as wf:
            for item in archive.infolist():
                if item.is_dir() or item.filename == f"{dist_info}/RECORD":
                    continue
                data = archive.read(item.filename)
                if item.filename == f"{dist_info}/WHEEL":
                    data = re.sub(rb"(?m)^(Tag: [^-\s]+-[^-\s]+-)\S+$",
                                  lambda m: m[1] + platform.encode(), data)
                wf.writestr(item, data)
        platforms.current().replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
        staging.rmdir()
    return target
