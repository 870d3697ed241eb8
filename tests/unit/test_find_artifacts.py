"""Where the CMake backend finds a module artifact: `<name><EXT_SUFFIX>`, and also the plain
`<name>.so` (and `<name>.abi3.so`) Python imports a module from. libKMCUDA 6.2.3 builds its
C-API module as the plain SHARED library `libKMCUDA.so` (its setup.py copies it beside
`py_modules`); the build stopped with "did not produce the module" (this machine, 2026-11-29,
`--arch sm_90`)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from flashbuild.building.backends.cmake import find_artifacts
from flashbuild.errors import BuildError

EXT = ".cpython-311-x86_64-linux-gnu.so"


def _request(name: str) -> Any:
    return SimpleNamespace(
        recipe=SimpleNamespace(artifact=[SimpleNamespace(name=name, kind="module")]),
        platform=SimpleNamespace(shared_lib_suffix=".so"), output_dir_var="OUT")


@pytest.mark.parametrize("file", [f"libKMCUDA{EXT}", "libKMCUDA.abi3.so", "libKMCUDA.so"])
def test_a_module_is_found_under_each_suffix_python_imports(tmp_path: Path, file: str) -> None:
    (tmp_path / file).write_bytes(b"\x7fELF")
    (found,) = find_artifacts(_request("libKMCUDA"), tmp_path, EXT)
    assert found.path == tmp_path / file and found.kind == "module"


def test_the_interpreters_own_suffix_wins_and_another_name_is_no_match(tmp_path: Path) -> None:
    (tmp_path / "m.so").write_bytes(b"\x7fELF")
    (tmp_path / f"m{EXT}").write_bytes(b"\x7fELF")
    (found,) = find_artifacts(_request("m"), tmp_path, EXT)
    assert found.path.name == f"m{EXT}"
    with pytest.raises(BuildError, match="did not produce the module `other`"):
        find_artifacts(_request("other"), tmp_path, EXT)
