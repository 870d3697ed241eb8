"""The loader shim: rendered from a real template, inserted between markers idempotently,
removable byte for byte; on Windows it registers only absolute folders that exist."""

from __future__ import annotations

import ast
import os
import runpy
import sys
from typing import TYPE_CHECKING

import pytest

from flashbuild.installing import shim

if TYPE_CHECKING:
    from pathlib import Path

INIT = '"""pkg docs."""\n\nfrom __future__ import annotations\n\nfrom pkg._C import f\n'


def test_render_is_valid_python_with_data(tmp_path: Path) -> None:
    text = shim.render(["C:\\CUDA\\v13.0\\bin\\x64", "/opt/cuda/lib64"], package="pkg")
    tree = ast.parse(text)
    data = next(t for t in tree.body if isinstance(t, ast.AnnAssign)
                and isinstance(t.target, ast.Name) and t.target.id == "DLL_DIRS")
    assert data.value is not None
    assert ast.literal_eval(data.value) == ("C:\\CUDA\\v13.0\\bin\\x64", "/opt/cuda/lib64")
    assert text.startswith("# Rendered by flashbuild")
    assert "DLL_DIRS: tuple[str, ...] = ()" in shim.render([], package="pkg")


def test_shim_does_nothing_on_linux(tmp_path: Path) -> None:
    path = tmp_path / "s.py"
    path.write_text(shim.render([str(tmp_path)], package="pkg"))
    if sys.platform == "win32":  # pragma: no cover - exercised by the Windows CI job
        pytest.skip("Linux behaviour")
    module = runpy.run_path(str(path))
    assert module["REGISTERED"] == [] and module["_HANDLES"] == []


def test_shim_registers_absolute_existing_folders(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The Windows path of the template, run here with add_dll_directory recorded."""
    calls: list[str] = []
    monkeypatch.setattr(sys, "platform", "win32")
    def add_dll_directory(path: str) -> object:
        calls.append(path)
        return object()

    monkeypatch.setattr(os, "add_dll_directory", add_dll_directory, raising=False)
    path = tmp_path / "s.py"
    path.write_text(shim.render([str(tmp_path), str(tmp_path / "missing"), "relative\\bin"],
                                package="pkg"))
    module = runpy.run_path(str(path))
    assert calls == [str(tmp_path)]  # not the missing one, never a relative (cwd) one
    assert module["REGISTERED"] == [str(tmp_path)] and len(module["_HANDLES"]) == 1


def test_dll_dirs_filters(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    got = shim.dll_dirs([tmp_path / "bin", tmp_path / "nope", "bin", tmp_path / "bin"])
    assert got == (str(tmp_path / "bin"),)
    assert shim.dll_dirs(["C:\\CUDA\\bin", "rel"], must_exist=False) == ("C:\\CUDA\\bin",)


def test_insert_after_docstring_and_future_and_idempotent() -> None:
    once = shim.insert(INIT)
    lines = once.splitlines()
    assert lines.index(shim.BEGIN) > lines.index("from __future__ import annotations")
    assert lines.index(shim.END) < lines.index("from pkg._C import f")
    assert shim.insert(once) == once
    assert shim.has_block(once) and not shim.has_block(INIT)
    ast.parse(once)


def test_remove_restores_bytes_crlf() -> None:
    crlf = INIT.replace("\n", "\r\n")
    inserted = shim.insert(crlf)
    assert "\r\n" + shim.BEGIN + "\r\n" in inserted and "\n\n" not in inserted.replace("\r\n", "")
    assert shim.remove(inserted) == crlf
    assert shim.remove(shim.insert(INIT)) == INIT
    assert shim.remove(INIT) == INIT


def test_empty_init_and_install_uninstall(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    shim.install_shim(pkg, ["/x"], package="pkg")
    text = (pkg / "__init__.py").read_text()
    assert text.startswith(shim.BEGIN)
    mtime = (pkg / "__init__.py").stat().st_mtime_ns
    shim.install_shim(pkg, ["/x"], package="pkg")  # unchanged: not rewritten
    assert (pkg / "__init__.py").stat().st_mtime_ns == mtime
    shim.uninstall_shim(pkg)
    assert (pkg / "__init__.py").read_text() == ""
    assert not (pkg / "_flashbuild_shim.py").exists()


def test_unterminated_block_is_an_error() -> None:
    from flashbuild.errors import InstallError

    with pytest.raises(InstallError):
        shim.remove(shim.BEGIN + "\nimport x\n")


@pytest.mark.parametrize("init", ['"""Docstring without a final newline."""',
                                  "from __future__ import annotations"])
def test_insert_into_init_without_final_newline_is_idempotent_and_removable(init: str) -> None:
    once = shim.insert(init)
    assert shim.has_block(once)
    assert shim.insert(once) == once
    assert shim.BEGIN not in shim.remove(once)
    assert shim.remove(once).rstrip("\n") == init
    compile(once, "__init__.py", "exec")


def test_folders_for_imports_finds_wheel_dll_folders_by_name(tmp_path: Path) -> None:
    from flashbuild.installing.shim import folders_for_imports

    site = tmp_path / "site-packages"
    cudart = site / "nvidia" / "cu13" / "bin" / "x86_64"
    torch_lib = site / "torch" / "lib"
    unrelated = site / "nvidia" / "cublas" / "bin"
    for folder, name in ((cudart, "cudart64_13.dll"), (torch_lib, "c10.dll"),
                         (unrelated, "cublas64_13.dll")):
        folder.mkdir(parents=True)
        (folder / name).write_bytes(b"MZ")
    found = folders_for_imports(["CUDART64_13.dll", "c10.dll", "KERNEL32.dll"], [site])
    assert set(found) == {cudart, torch_lib}
    assert folders_for_imports([], [site]) == []
