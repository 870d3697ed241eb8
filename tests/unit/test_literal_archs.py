"""A CMake tree that writes its own arch list (a target's CUDA_ARCHITECTURES property, a
`set(CMAKE_CUDA_ARCHITECTURES ...)`) over the one flashbuild passes: the arch check's fix
names the line and the recipe step that makes it read --arch (issue 30, class 3)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flashbuild.building.backends.cmake import arch_fix
from flashbuild.source.cmake_archlists import literal_arch_lists
from flashbuild.source.cmake_fileapi import CacheEntry

if TYPE_CHECKING:
    from pathlib import Path


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def test_each_literal_list_is_found_with_the_edit_that_reads_the_flag(tmp_path: Path) -> None:
    tree = _write(tmp_path, {
        "CMakeLists.txt": 'project(p LANGUAGES CUDA)\n'
                          'set(CMAKE_CUDA_ARCHITECTURES 80 86)\n'
                          'set_target_properties(a PROPERTIES CUDA_ARCHITECTURES "75;80")\n'
                          'set_target_properties(b PROPERTIES\n'
                          '    CUDA_ARCHITECTURES 90a)\n'
                          '# CUDA_ARCHITECTURES 70 in a comment\n'
                          'set_property(TARGET c PROPERTY CUDA_ARCHITECTURES '
                          '${CMAKE_CUDA_ARCHITECTURES})\n'
                          'set(MY_ARCHS "${CMAKE_CUDA_ARCHITECTURES}")\n',
        "cmake/arch.cmake": 'set_property(TARGET d PROPERTY CUDA_ARCHITECTURES "89-real")\n',
        "build/CMakeLists.txt": "set(CMAKE_CUDA_ARCHITECTURES 70)\n",
        ".git/x.cmake": "set(CMAKE_CUDA_ARCHITECTURES 70)\n",
    })
    found = [(s.file, s.line, s.replacement) for s in literal_arch_lists(tree)]
    assert found == [
        ("CMakeLists.txt", 2, 'set(CMAKE_CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")'),
        ("CMakeLists.txt", 3, 'set_target_properties(a PROPERTIES CUDA_ARCHITECTURES '
                              '"${CMAKE_CUDA_ARCHITECTURES}")'),
        ("CMakeLists.txt", 5, 'CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")'),
        ("cmake/arch.cmake", 1, 'set_property(TARGET d PROPERTY CUDA_ARCHITECTURES '
                                '"${CMAKE_CUDA_ARCHITECTURES}")'),
    ]


def test_the_fix_names_the_line_and_the_recipe_step(tmp_path: Path) -> None:
    tree = _write(tmp_path, {"CMakeLists.txt": 'set_target_properties(m PROPERTIES\n'
                                               '    CUDA_ARCHITECTURES "75;80")\n'
                                               'set(CMAKE_CUDA_ARCHITECTURES 80)\n'})
    fix = arch_fix([], tree)
    assert fix.startswith('CMakeLists.txt:2 writes its own arch list (`CUDA_ARCHITECTURES '
                          '"75;80")`)')
    assert 'transform = "replace-block"' in fix
    assert "anchor = 'CUDA_ARCHITECTURES \"75;80\")'" in fix
    assert "block = 'CUDA_ARCHITECTURES \"${CMAKE_CUDA_ARCHITECTURES}\")'" in fix
    assert "1 more such line(s): CMakeLists.txt:3" in fix


def test_a_cache_variable_that_holds_the_arch_is_still_the_first_fix(tmp_path: Path) -> None:
    tree = _write(tmp_path, {"CMakeLists.txt": 'set(CMAKE_CUDA_ARCHITECTURES ${GPU_ARCH})\n'
                                               'set_target_properties(m PROPERTIES '
                                               'CUDA_ARCHITECTURES 80)\n'})
    entries = [CacheEntry(name="GPU_ARCH", type="STRING", value="89")]
    fix = arch_fix(entries, tree)
    assert "GPU_ARCH=89" in fix and "replace-block" not in fix


def test_no_literal_list_keeps_the_general_fix(tmp_path: Path) -> None:
    tree = _write(tmp_path, {"CMakeLists.txt": "project(p LANGUAGES CUDA)\n"})
    assert "NAME" in arch_fix([], tree)
    assert "NAME" in arch_fix([])
