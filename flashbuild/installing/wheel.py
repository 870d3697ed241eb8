"""Build a wheel of the package with its freshly built binaries.

A wheel that pip installs is the idiomatic way to put a package into the active environment
and take it out again (`pip uninstall`). The tags are this interpreter's and platform's
(`cp311-cp311-linux_x86_64`, `cp312-cp312-win_amd64`): the binary is built for exactly them.
`wheel.wheelfile.WheelFile` writes the RECORD (hashes and sizes of every file).
"""

from __future__ import annotations

import re
import sysconfig
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from packaging import tags
from packaging.utils import canonicalize_name
from wheel.wheelfile import WheelFile

from flashbuild import __version__, platforms

if TYPE_CHECKING:
    from collections.abc import Mapping

#: Files of the source package never copied into a wheel: caches and stale binaries (the
#: fresh ones come from the build folder).
_SKIP_SUFFIXES = (".pyc", ".pyo", ".so", ".pyd", ".dll", ".dylib", ".flashbuild-tmp")


@dataclass(frozen=True)
class WheelTag:
    interpreter: str
    abi: str
    platform: str

    def __str__(self) -> str:
        return f"{self.interpreter}-{self.abi}-{self.platform}"


def current_tag() -> WheelTag:
    """This interpreter's most specific tag on the plain platform (`linux_x86_64`, not
    manylinux: the binary was not audited for manylinux; bdist_wheel does the same)."""
    platform = re.sub(r"[-.]", "_", sysconfig.get_platform())
    tag = next(iter(tags.sys_tags()))
    if tag.interpreter.startswith("cp"):
        tag = next(iter(tags.cpython_tags(platforms=[platform])))
    return WheelTag(tag.interpreter, tag.abi, platform)


def wheel_name(distribution: str, version: str, tag: WheelTag) -> str:
    dist = re.sub(r"[^\w\d.]+", "_", canonicalize_name(distribution)).replace("-", "_")
    return f"{dist}-{version}-{tag}.whl"


def dist_info_dir(wheel: Path) -> str:
    """The `.dist-info` folder of a wheel, from its file name (`name-version-...whl`), as
    WheelFile and installers derive it."""
    name, version = wheel.name.split("-")[:2]
    return f"{name}-{version}.dist-info"


def build_wheel(*, distribution: str, version: str, package: str | None,
                package_dir: Path | None, extra: Mapping[str, Path | bytes], out_dir: Path,
                top: Mapping[str, Path | bytes] | None = None,
                extra_meta: Mapping[str, bytes] | None = None,
                tag: WheelTag | None = None, summary: str = "") -> Path:
    """Write `<out_dir>/<dist>-<version>-<tag>.whl`.

    The package's files come from `package_dir` (Python files and package data, without
    caches and old binaries); `extra` maps a path inside the package to a file or to bytes
    (built binaries, the rendered shim, the patched `__init__.py`, the manifest) and wins
    over a file of the same name. `top` maps a path below the wheel's root to a file (a
    top-level extension module); `extra_meta` adds files to the `.dist-info` folder (the
    manifest of a wheel without a package). `package` None: no package, only `top`."""
    tag = tag or current_tag()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / wheel_name(distribution, version, tag)
    members: dict[str, Path | bytes] = {}
    if package is not None and package_dir is not None:
        for file in sorted(package_dir.rglob("*")):
            if file.is_file() and "__pycache__" not in file.parts and \
                    not file.name.endswith(_SKIP_SUFFIXES):
                members[f"{package}/{file.relative_to(package_dir).as_posix()}"] = file
        for inner, content in extra.items():
            members[f"{package}/{inner}"] = content
    members.update(top or {})
    metadata = (f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n"
                + (f"Summary: {summary}\n" if summary else ""))
    # What importlib.metadata.packages_distributions() reads to map an import name to this
    # distribution (verify --package NAME): the package and each top-level module.
    tops = [*([package.split(".")[0]] if package else []),
            *(PurePosixPath(name).name.split(".")[0] for name in (top or {}))]
    wheel_meta = (f"Wheel-Version: 1.0\nGenerator: flashbuild {__version__}\n"
                  f"Root-Is-Purelib: false\nTag: {tag}\n")
    # WheelFile derives the .dist-info name from the file name, so the partial file keeps
    # the real name, in a private folder, and is moved into place when complete.
    staging = Path(tempfile.mkdtemp(prefix=".wheel-", dir=out_dir))
    tmp = staging / path.name
    with WheelFile(tmp, "w") as wf:
        dist_info = wf.dist_info_path
        for arcname, content in sorted(members.items()):
            if isinstance(content, bytes):
                wf.writestr(arcname, content)
            else:
                wf.write(str(content), arcname)
        wf.writestr(f"{dist_info}/METADATA", metadata)
        wf.writestr(f"{dist_info}/WHEEL", wheel_meta)
        wf.writestr(f"{dist_info}/top_level.txt", "".join(f"{t}\n" for t in
                                                          dict.fromkeys(tops)))
        for name, content in sorted((extra_meta or {}).items()):
            wf.writestr(f"{dist_info}/{name}", content)
    platforms.current().replace(tmp, path)
    staging.rmdir()
    return path


def repack_wheel(wheel: Path, *, package: str | None, extra: Mapping[str, bytes],
                 out_dir: Path, extra_meta: Mapping[str, bytes] | None = None,
                 local_version: str = "") -> Path:
    """A copy of `wheel` (built by pip from a setup.py) with files added to or replaced in
    its package folder (the loader shim, the patched `__init__.py`, the manifest) and in its
    `.dist-info` folder (`extra_meta`: the manifest of a wheel without a package), under the
    same name. WheelFile writes a fresh RECORD with every file's hash, so `pip uninstall`
    still removes everything.

    `local_version` (`cu130torch2.13`) is added to a version that has no local part (one the
    tree set itself wins): the file name, the `.dist-info` folder and METADATA's `Version`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    old_info = dist_info_dir(wheel)
    name, version, rest = wheel.name.split("-", 2)
    if local_version and "+" not in version:
        version = f"{version}+{local_version}"
    path = out_dir / f"{name}-{version}-{rest}"
    new_info = f"{name}-{version}.dist-info"
    prefix = package.replace(".", "/") + "/" if package is not None else ""
    replaced = {prefix + inner: content for inner, content in extra.items()} \
        if package is not None else {}
    meta = f"{old_info}/"
    replaced.update({meta + inner: content for inner, content in (extra_meta or {}).items()})
    staging = Path(tempfile.mkdtemp(prefix=".wheel-", dir=out_dir))
    tmp = staging / path.name
    with zipfile.ZipFile(wheel) as src, WheelFile(tmp, "w") as wf:
        for info in src.infolist():
            if info.is_dir() or info.filename in replaced or \
                    info.filename == f"{old_info}/RECORD":
                continue
            data = src.read(info.filename)
            if info.filename.startswith(meta):
                if info.filename == f"{meta}METADATA" and new_info != old_info:
                    data = re.sub(rb"(?m)^Version: .*$", b"Version: " + version.encode(), data,
                                  count=1)
                info.filename = new_info + info.filename[len(old_info):]
            wf.writestr(info, data)
        for arcname, content in sorted(replaced.items()):
            moved = new_info + arcname[len(old_info):] if arcname.startswith(meta) else arcname
            wf.writestr(moved, content)
    platforms.current().replace(tmp, path)
    staging.rmdir()
    return path


def read_member(wheel: Path, arcname: str) -> bytes | None:
    """One file of a wheel, or None."""
    with zipfile.ZipFile(wheel) as zf:
        try:
            return zf.read(arcname)
        except KeyError:
            return None
