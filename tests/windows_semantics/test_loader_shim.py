"""The loader shim resolves its DLL folders at import time (issue 20): the recorded folders
are hints; a recreated venv or an upgraded CUDA is found where it is now, and a folder found
nowhere is named in the extension's ImportError instead of a bare "DLL load failed"."""

from __future__ import annotations

import runpy
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from flashbuild.installing import shim

OLD_VENV = "C:\\Users\\me\\old-venv\\Lib\\site-packages"
CUDA_128 = "C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v12.8\\bin"


def _shim(tmp_path: Path, folders: list[str]) -> dict[str, Any]:
    path = tmp_path / "rendered_shim.py"
    path.write_text(shim.render(folders, package="pkg"), encoding="utf-8")
    return runpy.run_path(str(path))  # off Windows it registers nothing at import


def test_a_recreated_venv_is_found_below_this_site_packages(tmp_path: Path) -> None:
    site = tmp_path / "new-venv" / "Lib" / "site-packages"
    (site / "nvidia" / "cu13" / "bin" / "x86_64").mkdir(parents=True)
    (site / "torch" / "lib").mkdir(parents=True)
    mod = _shim(tmp_path, [])
    use, missing = mod["resolve"]((OLD_VENV + "\\nvidia\\cu13\\bin\\x86_64",
                                   OLD_VENV + "\\torch\\lib"), [site], [])
    assert use == [str(site / "nvidia" / "cu13" / "bin" / "x86_64"), str(site / "torch" / "lib")]
    assert missing == []


def test_an_upgraded_toolkit_is_found_through_cuda_path(tmp_path: Path) -> None:
    new = tmp_path / "CUDA" / "v13.0"
    (new / "bin" / "x64").mkdir(parents=True)  # CUDA 13's installer: DLLs in bin\x64
    (new / "bin" / "x86_64").mkdir(parents=True)
    mod = _shim(tmp_path, [])
    roots = mod["toolkit_roots"]({"CUDA_PATH": str(new), "CUDA_PATH_V12_8": "C:\\gone",
                                  "Path": "C:\\Windows"})
    assert roots == [new, Path("C:\\gone")]
    use, missing = mod["resolve"]((CUDA_128, str(tmp_path)), [], roots)
    assert use == [str(new / "bin" / "x64"), str(tmp_path)] and missing == []


def test_a_folder_found_nowhere_is_reported_and_relative_ones_ignored(tmp_path: Path) -> None:
    mod = _shim(tmp_path, [])
    use, missing = mod["resolve"]((CUDA_128, OLD_VENV + "\\nvidia\\cu13\\bin", "bin"),
                                  [tmp_path / "site-packages"], [tmp_path / "no-cuda"])
    assert use == [] and missing == [CUDA_128, OLD_VENV + "\\nvidia\\cu13\\bin"]


def test_the_import_error_names_the_missing_folders(tmp_path: Path) -> None:
    # A module that fails to load, as `_C.pyd` does without its CUDA DLLs ("DLL load
    # failed"); here a file that is no shared library at all.
    pkg = tmp_path / "fbshimpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / f"_C{sysconfig.get_config_var('EXT_SUFFIX')}").write_bytes(b"not a library")
    mod = _shim(tmp_path, [])
    finder = mod["_Explain"]("fbshimpkg", [CUDA_128])
    sys.path.insert(0, str(tmp_path))
    sys.meta_path.insert(0, finder)
    try:
        with pytest.raises(ImportError) as info:
            __import__("fbshimpkg._C")
    finally:
        sys.meta_path.remove(finder)
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n.startswith("fbshimpkg")]:
            del sys.modules[name]
    text = str(info.value)
    assert CUDA_128 in text and "rebuild it with flashbuild" in text
    assert info.value.__cause__ is not None  # the loader's own message is kept


def test_the_shim_registers_the_toolkit_where_it_is_now(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The template's Windows path, run here with add_dll_directory recorded: before, the
    recorded v12.8 folder was gone and nothing was registered."""
    import os

    new = tmp_path / "v13.0"
    (new / "bin" / "x64").mkdir(parents=True)
    calls: list[str] = []

    def add_dll_directory(path: str) -> object:
        calls.append(path)
        return object()

    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(os, "add_dll_directory", add_dll_directory, raising=False)
    monkeypatch.setenv("CUDA_PATH", str(new))
    mod = _shim(tmp_path, [CUDA_128])
    assert calls == [str(new / "bin" / "x64")] and mod["REGISTERED"] == calls
