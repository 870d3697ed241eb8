"""Benchmark of the patch engine: plan (dry run) + apply + re-apply + revert of the csrc recipe
and of a generated ~5,000-file tree shaped like CUTLASS. Re-apply must rewrite zero files.

    python bench/bench_patch.py [--files 5000]

Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from flashbuild.patching.engine import patch_tree, revert_tree
from flashbuild.recipes.load import load_recipe, parse_recipe
from flashbuild.recipes.when import make_context

if TYPE_CHECKING:
    from flashbuild.recipes.model import Recipe

ROOT = Path(__file__).resolve().parent.parent

HEADER = """#pragma once
// generated header {i}
#include "cutlass/cutlass.h"
namespace cutlass {{ namespace gemm {{ namespace kernel{i} {{
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 1000)
#define CUTLASS_SM100_ENABLED_{i} 1
#endif
template <typename T, int N>
struct Traits{i} {{
  static constexpr int kSmem = N * sizeof(T);
  T data[N];
}};
}} }} }}
"""

KERNEL = """#include "cutlass/gemm/kernel_{i}.h"
template <typename T>
__global__ void kernel_{i}(T* out, const T* in, int n) {{
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx < n) out[idx] = in[idx];
}}
template __global__ void kernel_{i}<float>(float*, const float*, int);
"""

RECIPE = """
[recipe]
name = "cutlass-shaped"
[source]
path = "."
sources = ["**/*.cu", "**/*.h"]
[[patch]]
id = "sm120-macro"
transform = "macro-edit"
when = {{ arch = [">=120"] }}
expect = {{ sites = {headers} }}
[patch.params]
files = ["include/**/*.h"]
find = "__CUDA_ARCH__ == 1000"
replace = "__CUDA_ARCH__ == 1000 || __CUDA_ARCH__ == 1200"
directives = ["if"]
[[patch]]
id = "no-sm90"
transform = "exclude-sources"
when = {{ platform = "windows" }}
params = {{ globs = ["sm90/**"] }}
[[patch]]
id = "readme"
diff = "readme.patch"
"""

README_PATCH = """--- a/README.md
+++ b/README.md
@@ -1,2 +1,3 @@
 # cutlass-shaped
+Patched for sm_120.
 generated tree
"""


def generate(root: Path, files: int) -> Recipe:
    headers = files * 4 // 5
    for i in range(headers):
        path = root / "include" / "cutlass" / f"g{i % 40}" / f"kernel_{i}.h"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(HEADER.format(i=i))
    for i in range(files - headers):
        sub = "sm90" if i % 50 == 0 else "kernels"
        path = root / sub / f"k{i % 20}" / f"kernel_{i}.cu"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(KERNEL.format(i=i % headers))
    (root / "README.md").write_text("# cutlass-shaped\ngenerated tree\n")
    (root / "readme.patch").write_text(README_PATCH)
    return parse_recipe(RECIPE.format(headers=headers), root / "recipe.toml")


def measure(name: str, recipe: Recipe, tree: Path) -> list[str]:
    ctx = make_context(platform="windows", arch="sm120")
    t0 = time.perf_counter()
    planned = patch_tree(recipe, tree, ctx, dry_run=True)
    t1 = time.perf_counter()
    applied = patch_tree(recipe, tree, ctx)
    t2 = time.perf_counter()
    again = patch_tree(recipe, tree, ctx)
    t3 = time.perf_counter()
    revert_tree(tree)
    t4 = time.perf_counter()
    files = sum(1 for p in tree.rglob("*") if p.is_file())
    assert len(planned.files_written) == len(applied.files_written)
    return [name, str(files), f"{t1 - t0:.3f}", f"{t2 - t1:.3f}", f"{t3 - t2:.3f}",
            f"{t4 - t3:.3f}", str(len(applied.files_written)), str(len(again.files_written))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=5000)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        csrc = Path(tmp) / "csrc"
        shutil.copytree(ROOT / "csrc", csrc, ignore=shutil.ignore_patterns(
            "build*", "__pycache__", "*.so", ".flashbuild"))
        rows.append(measure("csrc recipe (windows, sm_120)", load_recipe("csrc"), csrc))
        big = Path(tmp) / "cutlass"
        big.mkdir()
        rows.append(measure(f"generated CUTLASS-shaped ({args.files} files)",
                            generate(big, args.files), big))
    head = ["tree", "files", "plan (s)", "apply (s)", "re-apply (s)", "revert (s)",
            "files written", "re-apply rewrites"]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if any(row[-1] != "0" for row in rows):
        raise SystemExit("re-apply rewrote files: it must rewrite none")


if __name__ == "__main__":
    main()
