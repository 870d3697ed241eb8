"""What a build produces: the binaries a backend hands on, and the install mode it builds for.

These types are building's output, so building defines them (STYLE.md rule 13: a type a stage
produces is defined by that stage or below it); installing takes them from here, and the
backends never import installing.
"""

from __future__ import annotations

import shutil
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Literal

from flashbuild.errors import UsageError
from flashbuild.recipes.model import ArtifactKind

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from flashbuild.proc import Runner

__all__ = ["ArtifactKind", "BuiltArtifact", "InstallMode", "ext_suffix", "parse_install_mode"]

InstallMode = Literal["wheel", "inplace", "none"]
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
    gpu_code: bool = True
    """False when the build knows it compiled no device code into this module (a setup.py's
    CppExtension beside its CUDA extensions): the manifest says so for verify."""
    jit: str = ""
    """The name the tree's `torch.utils.cpp_extension.load(name=...)` asks for, when this
    module was built ahead of time from a recipe's `jit` file: the loader shim answers that
    call with it."""


def ext_suffix(python: str, runner: Runner, env: Mapping[str, str]) -> str:
    """The extension suffix of the interpreter the module is built for (CMake's FindPython
    reads the same value); this interpreter's needs no process."""
    if python == sys.executable or Path(python).resolve() == Path(sys.executable).resolve():
        return str(sysconfig.get_config_var("EXT_SUFFIX"))
    done = runner.run([python, "-c", "import sysconfig; print(sysconfig.get_config_var("
                       "'EXT_SUFFIX'))"], env=env, timeout=60)
    return done.stdout.strip().splitlines()[-1]


def copy_from_wheel(wheel: Path, out: Path,
                    keep: Callable[[PurePosixPath], bool]) -> list[tuple[PurePosixPath, Path]]:
    """Copy the members of a built wheel that `keep` takes (never its `.dist-info`) into a
    fresh `out/` at their paths inside the wheel, where verify and the manifest read them.
    Returns (path inside the wheel, copy) per member, in the wheel's order."""
    if out.is_dir():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    found: list[tuple[PurePosixPath, Path]] = []
    with zipfile.ZipFile(wheel) as zf:
        for member in zf.namelist():
            inner = PurePosixPath(member)
            if ".dist-info" in inner.parts[0] or not keep(inner):
                continue
            dest = out.joinpath(*inner.parts)
            dest.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(member) as src, dest.open("wb") as fh:
                shutil.copyfileobj(src, fh)
            found.append((inner, dest))
    return found
