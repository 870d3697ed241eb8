"""The stored introspection model (pipeline/introspect.py): an unchanged tree reuses it; a
changed build file, a new file, a changed environment value the setup.py read or a changed
bindings unit asks the build again. Nothing runs here."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashbuild.pipeline import introspect
from flashbuild.source.setup_record import EnvRead
from flashbuild.source.treemodel import Bindings, BuildTarget, SourceUnit, TreeModel

MODEL = TreeModel(system="setuptools", via="setup.py record mode", targets=(
    BuildTarget(name="pkg._C", kind="module", artifact="", defined_at="setup.py `pkg._C`",
                sources=(SourceUnit(path="csrc/k.cu", language="CUDA", includes=("csrc",),
                                    defines=(), flags=(), arch_flags=(), origin="o"),)),),
    env_reads=(EnvRead("PKG_FAST", "setup.py:3"),),
    bindings=(Bindings(module="_C", source="csrc/bind.cpp", names=("run",)),))


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "csrc").mkdir(parents=True)
    (root / "setup.py").write_text("import os\nos.environ.get('PKG_FAST')\n", encoding="utf-8")
    (root / "csrc" / "k.cu").write_text("__global__ void k() {}\n", encoding="utf-8")
    (root / "csrc" / "bind.cpp").write_text("// PYBIND11_MODULE\n", encoding="utf-8")
    return root


def test_the_tree_digest_follows_build_files_and_names_not_sources(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    first = introspect.tree_digest(root)
    (root / "csrc" / "k.cu").write_text("__global__ void k() { }\n", encoding="utf-8")
    assert introspect.tree_digest(root) == first  # a source's content is not the build's
    (root / "setup.py").write_text("import os\n", encoding="utf-8")
    second = introspect.tree_digest(root)
    assert second != first
    (root / "csrc" / "new.cu").write_text("", encoding="utf-8")  # a glob would see it
    third = introspect.tree_digest(root)
    assert third != second
    (root / "build").mkdir()
    (root / "build" / "out.o").write_text("", encoding="utf-8")  # an earlier build's output
    assert introspect.tree_digest(root) == third


def test_a_stored_model_is_reused_until_what_it_read_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _tree(tmp_path)
    scratch = tmp_path / "scratch"
    monkeypatch.setenv("PKG_FAST", "1")
    introspect._store(scratch, "k" * 64, MODEL, root)
    assert introspect._cached(scratch, "k" * 64) == MODEL
    assert introspect._cached(scratch, "j" * 64) is None  # another key
    monkeypatch.setenv("PKG_FAST", "0")
    assert introspect._cached(scratch, "k" * 64) is None  # the setup.py reads it
    monkeypatch.setenv("PKG_FAST", "1")
    (root / "csrc" / "bind.cpp").write_text("// PYBIND11_MODULE changed\n", encoding="utf-8")
    assert introspect._cached(scratch, "k" * 64) is None  # the exports may differ


def test_the_key_holds_what_cmake_package_lookup_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CMAKE_PREFIX_PATH", "/opt/pkgs")
    monkeypatch.setenv("Torch_DIR", "/opt/torch/share/cmake")
    monkeypatch.setenv("FLASHBUILD_UNRELATED", "1")
    seen = dict(introspect._lookup_environment())
    assert seen["CMAKE_PREFIX_PATH"] == "/opt/pkgs" and "Torch_DIR" in seen
    assert "FLASHBUILD_UNRELATED" not in seen
