"""xformers' own sparse24 tests (tests/test_sparsity24.py) against the xformers flashbuild
installed. The test file imports two helpers from the tree's tests/utils.py, and that module
imports `mslk` (xformers' attention moved there), a package the GPU machine lacks and the
sparse24 tests never use. This copies the test file unchanged but for that one import, which
comes instead from a module holding the two helpers' own source, taken from tests/utils.py with
`ast` (nothing of utils.py is executed), then runs pytest on the copy.

    python3 bench/seed_xformers_sp24.py TREE WORKDIR [pytest args...]
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path


def main() -> int:
    tree, work = Path(sys.argv[1]), Path(sys.argv[2])
    work.mkdir(parents=True, exist_ok=True)
    utils = (tree / "tests" / "utils.py").read_text(encoding="utf-8")
    module = ast.parse(utils)
    kept = [ast.get_source_segment(utils, node) for node in module.body
            if (isinstance(node, ast.FunctionDef) and node.name == "assert_allclose")
            or (isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "cuda_only" for t in node.targets))]
    assert len(kept) == 2, "tests/utils.py no longer defines assert_allclose and cuda_only"
    header = "from typing import Optional\n\nimport numpy as np\nimport pytest\nimport torch\n\n\n"
    (work / "sp24_utils.py").write_text(header + "\n\n".join(k or "" for k in kept) + "\n",
                                        encoding="utf-8")
    test = (tree / "tests" / "test_sparsity24.py").read_text(encoding="utf-8")
    old = "from .utils import assert_allclose, cuda_only"
    assert test.count(old) == 1, "the test file's helper import changed"
    (work / "test_sparsity24.py").write_text(test.replace(old, old.replace(".utils",
                                                                         "sp24_utils")),
                                             encoding="utf-8")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
           str(work), str(work / "test_sparsity24.py"), *sys.argv[3:]]
    return subprocess.call(cmd, cwd=work)


if __name__ == "__main__":
    sys.exit(main())
