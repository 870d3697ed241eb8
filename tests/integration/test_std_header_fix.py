"""A tree's own source that uses a standard-library name without its header (torch-points-kernels
0.7.0's neighbors.cpp: `std::unique_ptr` with `<random>` but no `<memory>`, which GCC 13's
libstdc++ no longer includes through `<random>`; seen on an H200 machine). The build's
paragraph turns GCC's note into the recipe step that adds the header, and that step, applied
by `flashbuild patch`, makes the file compile (real g++ here, which says the same of a file
that includes `<vector>` alone)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashbuild.building.progress import std_header_fix, std_header_steps
from flashbuild.cli import app

pytestmark = pytest.mark.integration

SOURCE = """// a kd-tree search, as torch-points-kernels' cpu/src/neighbors.cpp is laid out
#include <cstdio>
#include <vector>

int count_neighbors(int n) {
    std::unique_ptr<std::vector<int>> index(new std::vector<int>(n));
    return static_cast<int>(index->size());
}
"""

#: The note as the H200 machine's GCC wrote it (typographic quotes), for a file of the tree.
RECORDED = ("{file}:{line}:1: note: \u2018std::unique_ptr\u2019 is defined in header "
            "\u2018<memory>\u2019; did you forget to \u2018#include <memory>\u2019?")


def _compile(cxx: str, source: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([cxx, "-fsyntax-only", "-x", "c++", str(source)],
                          capture_output=True, text=True, check=False, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})


def test_gccs_note_becomes_a_recipe_step_that_makes_the_file_compile(tmp_path: Path) -> None:
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no g++")
    tree = tmp_path / "tree"
    source = tree / "cpu" / "src" / "neighbors.cpp"
    source.parent.mkdir(parents=True)
    source.write_text(SOURCE, encoding="utf-8")
    failed = _compile(cxx, source)
    assert failed.returncode != 0

    fix = std_header_fix(std_header_steps(failed.stderr.splitlines(), tree))
    assert 'file = "cpu/src/neighbors.cpp"' in fix
    assert 'anchor = """#include <vector>"""' in fix
    assert 'block = "#include <memory>"' in fix
    # The machine's own spelling of the note (typographic quotes) gives the same step.
    line = re.search(r"neighbors\.cpp:(\d+):\d+: note:", failed.stderr)
    assert line is not None, failed.stderr
    recorded = [RECORDED.format(file=source, line=line[1])]
    assert std_header_fix(std_header_steps(recorded, tree)) == fix

    recipe = tmp_path / "fix.toml"
    recipe.write_text('[recipe]\nname = "stdheader"\n[source]\npath = "tree"\n\n' +
                      fix.split("\n", 1)[1] + "\n", encoding="utf-8")
    patched = CliRunner().invoke(app, ["patch", "--recipe", str(recipe)])
    assert patched.exit_code == 0, patched.output
    assert "#include <vector>\n#include <memory>\n" in source.read_text(encoding="utf-8")
    assert _compile(cxx, source).returncode == 0

    reverted = CliRunner().invoke(app, ["patch", "--recipe", str(recipe), "--revert"])
    assert reverted.exit_code == 0, reverted.output
    assert source.read_text(encoding="utf-8") == SOURCE


def test_a_note_for_a_file_outside_the_tree_or_an_ambiguous_anchor_gives_no_step(
        tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.cpp").write_text("#include <vector>\n#include <vector>\nint x;\n",
                                encoding="utf-8")
    outside = tmp_path / "other.cpp"
    outside.write_text("#include <vector>\nint y;\n", encoding="utf-8")
    assert std_header_steps([RECORDED.format(file=outside, line=2)], tree) == ()
    # Line 7 is past the end of a.cpp; line 3's anchor (`#include <vector>`) is on two lines.
    assert std_header_steps([RECORDED.format(file=tree / "a.cpp", line=7)], tree) == ()
    assert std_header_steps([RECORDED.format(file=tree / "a.cpp", line=3)], tree) == ()


IMPL = """#pragma once

#include <iostream>
#include <vector>
#include "rasterizer.h"

namespace CudaRasterizer
{
	static void obtain(char*& chunk, std::size_t alignment)
	{
		std::size_t offset = (reinterpret_cast<std::uintptr_t>(chunk) + alignment - 1);
	}
}
"""


def test_nvccs_error_without_a_note_becomes_the_same_step(tmp_path: Path) -> None:
    """diff-gaussian-rasterization's rasterizer_impl.h on the H200 machine (GCC 13's
    libstdc++, 2026-11-29): nvcc's front end names no header, only the name; the step puts
    `<cstdint>` after the last include above the use. A name the table does not know, or one
    used above every include, gives no step."""
    tree = tmp_path / "tree"
    source = tree / "cuda_rasterizer" / "rasterizer_impl.h"
    source.parent.mkdir(parents=True)
    source.write_text(IMPL, encoding="utf-8")
    recorded = [f'{source}(11): error: namespace "std" has no member "uintptr_t"',
                f'{source}(11): error: namespace "std" has no member "frobnicate"']
    steps = std_header_steps(recorded, tree)
    assert [(s.file, s.anchor, s.header, s.name) for s in steps] == [
        ("cuda_rasterizer/rasterizer_impl.h", '#include "rasterizer.h"', "cstdint",
         "std::uintptr_t")]
    plain = std_header_steps([f'{source}(11): error: identifier "uint32_t" is undefined'],
                             tree)
    assert [(s.header, s.name) for s in plain] == [("cstdint", "uint32_t")]
    assert std_header_steps([f'{source}(1): error: identifier "uint32_t" is undefined'],
                            tree) == ()
    recipe = tmp_path / "fix.toml"
    recipe.write_text('[recipe]\nname = "stdheader"\n[source]\npath = "tree"\n\n' +
                      std_header_fix(steps).split("\n", 1)[1] + "\n", encoding="utf-8")
    patched = CliRunner().invoke(app, ["patch", "--recipe", str(recipe)])
    assert patched.exit_code == 0, patched.output
    assert '#include "rasterizer.h"\n#include <cstdint>\n' in source.read_text(encoding="utf-8")


def test_the_include_goes_outside_conditional_blocks_but_inside_a_guard(tmp_path: Path) -> None:
    """An include under `#ifdef _WIN32` would add the header on one platform only (a review
    of the first version); a header's own include guard is no such block."""
    tree = tmp_path / "tree"
    source = tree / "impl.h"
    source.parent.mkdir(parents=True)
    source.write_text("#ifndef IMPL_H\n#define IMPL_H\n#include <vector>\n#ifdef _WIN32\n"
                      "#include <windows.h>\n#endif\n\nstd::uintptr_t f();\n#endif\n",
                      encoding="utf-8")
    steps = std_header_steps(
        [f'{source}(8): error: namespace "std" has no member "uintptr_t"'], tree)
    assert [(s.anchor, s.header) for s in steps] == [("#include <vector>", "cstdint")]
