"""How the Windows loader resolves a module's DLLs (issue 11, item 7), on recorded PE files.

`delayed.dll` (tests/fixtures/verify, built by make_fixtures.sh with mingw-w64) imports
KERNEL32 and msvcrt normally and `flashbuild_delayed.dll` with delay loading; that DLL exists
nowhere. `kern.dll` imports KERNEL32, nvcuda.dll, helper.dll and flashbuild_gone.dll."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from flashbuild.platforms import get
from flashbuild.proc import ProcessRunner
from flashbuild.verifying.binaries import (
    KNOWN_DLLS,
    Resolution,
    read_link_info,
    resolve,
    resolve_windows,
)

V = Path(__file__).resolve().parent.parent / "fixtures" / "verify"


def _system(tmp_path: Path) -> dict[str, str]:
    system32 = tmp_path / "Windows" / "System32"
    system32.mkdir(parents=True)
    for name in ("KERNEL32.DLL", "msvcrt.dll", "ucrtbase.dll"):
        (system32 / name).write_bytes(b"")
    # `SYSTEMROOT` as `dict(os.environ)` spells it on Windows.
    return {"SYSTEMROOT": str(tmp_path / "Windows")}


def test_delay_load_import_is_read_apart() -> None:
    info = read_link_info(V / "delayed.dll")
    assert [n.lower() for n in info.needed] == ["kernel32.dll", "msvcrt.dll"]
    assert info.delay_needed == ("flashbuild_delayed.dll",)


def test_missing_delay_loaded_dll_is_not_a_missing_dependency(tmp_path: Path) -> None:
    # The import succeeds on Windows: the loader resolves a delay-load DLL at its first call.
    env = _system(tmp_path)
    module = tmp_path / "site" / "pkg" / "delayed.dll"
    module.parent.mkdir(parents=True)
    shutil.copy(V / "delayed.dll", module)
    deps = {d.name: d for d in resolve(read_link_info(module), platform=get("windows"),
                                       env=env)}
    delayed = deps["flashbuild_delayed.dll"]
    assert delayed.resolution is Resolution.DELAYED_MISSING and delayed.delayed
    assert "first call" in delayed.via
    assert not any(d.resolution is Resolution.MISSING for d in deps.values())
    assert deps["KERNEL32.dll"].resolution is Resolution.SYSTEM


def test_known_dlls_are_the_registry_list() -> None:
    # Only System32 residents, not KnownDLLs: a copy beside the module is what Windows loads.
    for not_known in ("ucrtbase.dll", "version.dll", "bcrypt.dll", "crypt32.dll", "winmm.dll",
                      "dbghelp.dll"):
        assert not_known not in KNOWN_DLLS
    assert {"kernel32.dll", "user32.dll", "msvcrt.dll", "ws2_32.dll"} <= KNOWN_DLLS


def test_app_local_copy_of_a_system32_dll_wins(tmp_path: Path) -> None:
    env = _system(tmp_path)
    module = tmp_path / "pkg" / "kern.dll"
    module.parent.mkdir()
    shutil.copy(V / "kern.dll", module)
    (module.parent / "ucrtbase.dll").write_bytes(b"")
    info = read_link_info(module)
    info = type(info)(info.path, info.format, (*info.needed, "ucrtbase.dll"))
    deps = {d.name: d for d in resolve_windows(info, env=env, dll_dirs=[])}
    assert deps["ucrtbase.dll"].via == "the module's folder"


def test_search_order_module_folder_then_application_then_shim_folders(tmp_path: Path) -> None:
    # LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR (the module's folder) first, then DEFAULT_DIRS: the
    # application folder, AddDllDirectory folders, System32.
    env = _system(tmp_path)
    module = tmp_path / "pkg" / "kern.dll"
    app = tmp_path / "python"
    shim = tmp_path / "cuda" / "bin"
    for folder in (module.parent, app, shim):
        folder.mkdir(parents=True)
    shutil.copy(V / "kern.dll", module)
    for folder in (app, shim):
        shutil.copy(V / "helper.dll", folder / "helper.dll")
    (shim / "flashbuild_gone.dll").write_bytes(b"")
    info = read_link_info(module)
    deps = {d.name: d for d in resolve_windows(info, env=env, dll_dirs=[shim], app_dir=app)}
    assert deps["helper.dll"].via == "the application folder"
    assert deps["flashbuild_gone.dll"].via == "a loader-shim DLL folder"
    shutil.copy(V / "helper.dll", module.parent / "helper.dll")
    deps = {d.name: d for d in resolve_windows(info, env=env, dll_dirs=[shim], app_dir=app)}
    assert deps["helper.dll"].via == "the module's folder"
    assert deps["helper.dll"].path == str(module.parent / "helper.dll")


LOADER = r"""
#include <windows.h>
#include <stdio.h>
int main(int argc, char** argv) {
  if (argc < 2) return 2;
  HMODULE m = LoadLibraryA(argv[1]);
  if (!m) { printf("%s: load failed %lu\n", argv[1], GetLastError()); return 0; }
  printf("%s: loaded\n", argv[1]);
  return 0;
}
"""


@pytest.mark.integration
@pytest.mark.slow
def test_a_real_loader_agrees(tmp_path: Path) -> None:
    """wine's loader (run on the mingw-built fixtures) loads the module whose delay-loaded DLL
    is missing and refuses the one whose ordinary import is missing: what verify reports."""
    mingw = "x86_64-w64-mingw32-gcc"
    if shutil.which(mingw) is None or shutil.which("wine") is None:
        pytest.skip(f"{mingw} or wine not installed")
    (tmp_path / "loader.c").write_text(LOADER)
    run = ProcessRunner()
    run.run([mingw, "-o", tmp_path / "loader.exe", tmp_path / "loader.c"], timeout=120)
    shutil.copy(V / "delayed.dll", tmp_path / "delayed.dll")
    # hard.dll: the same import as delayed.dll's, as an ordinary one.
    (tmp_path / "gone.def").write_text("LIBRARY flashbuild_delayed.dll\nEXPORTS\n"
                                       "flashbuild_delayed\n")
    run.run(["x86_64-w64-mingw32-dlltool", "-d", tmp_path / "gone.def", "-l",
             tmp_path / "libgone.a"], timeout=120)
    (tmp_path / "hard.c").write_text((V / "delayed.c").read_text())
    run.run([mingw, "-shared", "-o", tmp_path / "hard.dll", tmp_path / "hard.c",
             f"-L{tmp_path}", "-lgone"], timeout=120)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "WINEPREFIX": str(tmp_path / "prefix"), "WINEDEBUG": "-all",
           "WINEDLLOVERRIDES": "mscoree=;mshtml="}
    try:
        out = [run.run(["wine", tmp_path / "loader.exe", name], cwd=tmp_path, env=env,
                       timeout=300).stdout.strip() for name in ("delayed.dll", "hard.dll")]
    finally:
        run.run(["wineserver", "-k"], env=env, check=False)
    # 126 = ERROR_MOD_NOT_FOUND: hard.dll's flashbuild_delayed.dll is nowhere.
    assert out == ["delayed.dll: loaded", "hard.dll: load failed 126"]
    # ...which is what resolve() says of the same two files.
    system = {"SystemRoot": str(tmp_path / "prefix" / "drive_c" / "windows")}
    delayed = resolve(read_link_info(tmp_path / "delayed.dll"), platform=get("windows"),
                      env=system)
    assert [d.resolution for d in delayed if d.name == "flashbuild_delayed.dll"] == [
        Resolution.DELAYED_MISSING]
    hard = resolve(read_link_info(tmp_path / "hard.dll"), platform=get("windows"), env=system)
    assert [d.resolution for d in hard if d.name == "flashbuild_delayed.dll"] == [
        Resolution.MISSING]


def test_a_missing_delay_loaded_dll_is_a_warning_not_counted_as_resolved(
        tmp_path: Path) -> None:
    # Issue 20: verify counted it among the libraries that resolve, and said nothing.
    from flashbuild.verifying.verify import Status, _dep_checks

    env = _system(tmp_path)
    module = tmp_path / "site" / "pkg" / "delayed.dll"
    module.parent.mkdir(parents=True)
    shutil.copy(V / "delayed.dll", module)
    deps = resolve(read_link_info(module), platform=get("windows"), env=env)
    checks = _dep_checks(deps, "pkg")
    warn = [c for c in checks if c.status is Status.WARN]
    assert len(warn) == 1 and "flashbuild_delayed.dll" in warn[0].summary
    assert "first call" in warn[0].summary
    (ok,) = [c for c in checks if c.status is Status.OK]
    assert ok.summary == f"{len(deps) - 1} of {len(deps)} libraries resolve"
    assert not any(c.status is Status.FAIL for c in checks)
