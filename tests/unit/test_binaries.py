"""Dependency reading and loader-style resolution (ELF and PE), hermetic."""

from __future__ import annotations

import shutil
from pathlib import Path

from flashbuild.platforms import get
from flashbuild.verifying.binaries import (
    Resolution,
    parse_ldconfig,
    read_link_info,
    resolve,
    resolve_linux,
    resolve_windows,
)
from tests.fakes import ReplayRunner

V = Path(__file__).resolve().parent.parent / "fixtures" / "verify"
LDCONFIG = (V / "ldconfig-p.txt").read_text()


def test_parse_ldconfig_prefers_64_bit() -> None:
    cache = parse_ldconfig(LDCONFIG)
    assert cache["libc.so.6"] == "/lib/x86_64-linux-gnu/libc.so.6"
    assert "536 libs" not in " ".join(cache)


def test_elf_needed_and_runpath() -> None:
    info = read_link_info(V / "libmissing_dep.so")
    assert info.needed[:2] == ("libflashbuild_gone.so", "libcudart.so.13")
    assert info.runpath == ("$ORIGIN/lib",) and info.rpath == ()


def test_linux_names_the_missing_library(tmp_path: Path) -> None:
    module = tmp_path / "libmissing_dep.so"
    shutil.copy(V / "libmissing_dep.so", module)
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libcudart.so.13").write_bytes(b"")  # found through $ORIGIN/lib
    runner = ReplayRunner()
    runner.add("ldconfig", "-p", out=LDCONFIG)
    deps = {d.name: d for d in resolve(read_link_info(module), platform=get("linux"),
                                       env={"PATH": "/usr/bin"}, runner=runner)}
    assert deps["libflashbuild_gone.so"].resolution is Resolution.MISSING
    assert str(tmp_path / "lib") in deps["libflashbuild_gone.so"].via
    assert deps["libcudart.so.13"].path == str(tmp_path / "lib" / "libcudart.so.13")
    assert deps["libcudart.so.13"].via == "RUNPATH"
    assert deps["libc.so.6"].via == "ld.so cache"


def test_ld_library_path_comes_before_runpath(tmp_path: Path) -> None:
    module = tmp_path / "m.so"
    shutil.copy(V / "libmissing_dep.so", module)
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "libflashbuild_gone.so").write_bytes(b"")
    deps = resolve_linux(read_link_info(module), env={"LD_LIBRARY_PATH": str(extra)},
                         cache=parse_ldconfig(LDCONFIG), default_dirs=())
    gone = next(d for d in deps if d.name == "libflashbuild_gone.so")
    assert gone.resolution is Resolution.FOUND and gone.via == "LD_LIBRARY_PATH"


def test_pe_imports() -> None:
    info = read_link_info(V / "kern.dll")
    assert info.format == "pe"
    assert set(info.needed) >= {"flashbuild_gone.dll", "helper.dll", "nvcuda.dll",
                                "KERNEL32.dll"}


def _windows(tmp_path: Path, *, driver: bool) -> tuple[Path, dict[str, str]]:
    install = tmp_path / "site" / "flashkern"
    install.mkdir(parents=True)
    shutil.copy(V / "kern.dll", install / "kern.dll")
    system32 = tmp_path / "Windows" / "System32"
    system32.mkdir(parents=True)
    if driver:
        (system32 / "NVCUDA.DLL").write_bytes(b"")  # case differs: Windows ignores case
    return install, {"SystemRoot": str(tmp_path / "Windows")}


def test_windows_resolution_names_missing_dll(tmp_path: Path) -> None:
    install, env = _windows(tmp_path, driver=True)
    shim_dir = tmp_path / "cuda" / "bin"
    shim_dir.mkdir(parents=True)
    shutil.copy(V / "helper.dll", shim_dir / "helper.dll")
    deps = {d.name: d for d in resolve_windows(read_link_info(install / "kern.dll"), env=env,
                                               dll_dirs=[shim_dir])}
    assert deps["flashbuild_gone.dll"].resolution is Resolution.MISSING
    assert str(shim_dir) in deps["flashbuild_gone.dll"].via
    assert deps["helper.dll"].via == "a loader-shim DLL folder"
    assert deps["KERNEL32.dll"].resolution is Resolution.SYSTEM
    assert deps["nvcuda.dll"].resolution is Resolution.DRIVER


def test_windows_module_folder_first_and_driver_missing_is_not_missing(tmp_path: Path) -> None:
    install, env = _windows(tmp_path, driver=False)
    shutil.copy(V / "helper.dll", install / "helper.dll")
    deps = {d.name: d for d in resolve(read_link_info(install / "kern.dll"),
                                       platform=get("windows"), env=env)}
    assert deps["helper.dll"].via == "the module's folder"
    assert deps["nvcuda.dll"].resolution is Resolution.DRIVER_MISSING
