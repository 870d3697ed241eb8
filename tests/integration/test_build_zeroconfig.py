"""`flashbuild build PATH --arch X` with no recipe (issue 19, item 1): a CMake tree and a
setup.py tree that no bundled recipe matches are drafted as `recipe init` drafts them and
built; an unchanged re-run drafts nothing and installs nothing.

CPU torch here: the setup.py fixture drops torch's `*_cuda` libraries from its link (test
scaffolding) so pip finishes the wheel; `--install none` keeps the venv as it is.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flashbuild.building.backends import setuptools as st

pytestmark = pytest.mark.integration

MINIKERN = Path(__file__).resolve().parent.parent / "fixtures" / "build" / "minikern"
EXT = __import__("sysconfig").get_config_var("EXT_SUFFIX")


HELPERS = """#include <vector>

int helper_count(int n) {
    std::unique_ptr<std::vector<int>> index(new std::vector<int>(n));
    return static_cast<int>(index->size());
}
"""


def _cli(tree: Path, cuda: Path) -> tuple[int, dict[str, object], str]:
    argv = [sys.executable, "-m", "flashbuild", "build", str(tree), "--arch", "sm_90a",
            "--cuda", str(cuda), "--jobs", "2", "--launcher", "none", "--install", "inplace",
            "--json"]
    done = subprocess.run(argv, cwd=tree.parent, capture_output=True, text=True, check=False,
                          timeout=900)
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        doc = {}
    return done.returncode, doc, done.stderr


def test_a_cmake_tree_without_a_recipe_is_drafted_and_built(tmp_path: Path,
                                                          cuda_toolkit_root: Path) -> None:
    tree = tmp_path / "mk"
    shutil.copytree(MINIKERN, tree)
    (tree / "minikern.toml").unlink()
    # One of its files uses std::unique_ptr with <vector> alone, as torch-points-kernels'
    # neighbors.cpp did (GCC 13's <random> no longer includes <memory>; this g++'s <vector>
    # does not either): GCC names the header, and the build adds it to its own draft.
    (tree / "helpers.cpp").write_text(HELPERS, encoding="utf-8")
    with (tree / "CMakeLists.txt").open("a", encoding="utf-8") as cmake:
        cmake.write("target_sources(_C PRIVATE helpers.cpp)\n")
    code, doc, err = _cli(tree, cuda_toolkit_root)
    assert code == 0, err
    recipe = doc["recipe"]
    assert isinstance(recipe, dict) and recipe["how"] == "drafted"
    draft = Path(str(recipe["draft"]))
    assert draft.parent == tmp_path / "build" / "flashbuild" and draft.is_file()
    assert "drafting one as `flashbuild recipe init` does" in err
    assert "targets _C, minikern_attn" in err
    assert "helpers.cpp uses std::unique_ptr without including <memory>" in " ".join(err.split())
    assert 'anchor = """#include <vector>"""' in draft.read_text(encoding="utf-8")
    assert (tree / "python" / "minikern" / f"_C{EXT}").is_file()
    # The build patched its own copy of the tree, never the tree.
    assert (tree / "helpers.cpp").read_text(encoding="utf-8") == HELPERS
    # An unchanged re-run: the draft is reused (no scan), nothing compiled or installed.
    code, doc, err = _cli(tree, cuda_toolkit_root)
    assert code == 0, err
    assert "drafting one" not in err
    assert doc["ninja_no_work"] is True
    install = doc["install"]
    assert isinstance(install, dict) and install["skipped"] is True


SETUP = """from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

ext = CUDAExtension(name="zc._C", sources=["csrc/k.cu"])
# Test scaffolding: a CPU-only torch has no *_cuda libraries; without them the link succeeds.
ext.libraries = [lib for lib in ext.libraries if not lib.endswith("_cuda")]
setup(name="zc", version="0.1", packages=["zc"], ext_modules=[ext],
      cmdclass={"build_ext": BuildExtension})
"""


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_a_setup_py_tree_without_a_recipe_builds_to_the_wheel(
        tmp_path: Path, cuda_toolkit_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flashbuild.pipeline.command import run_build

    monkeypatch.setattr(st, "check_torch_cuda", lambda torch, request: None)
    tree = tmp_path / "zc"
    (tree / "csrc").mkdir(parents=True)
    (tree / "zc").mkdir()
    (tree / "zc" / "__init__.py").write_text("from zc import _C\n")
    (tree / "setup.py").write_text(SETUP)
    (tree / "csrc" / "k.cu").write_text('extern "C" __global__ void k(float* x) {}\n')
    build_dir = tmp_path / "b"
    assert run_build(recipe=None, source=tree, arch="sm_90a", cuda=cuda_toolkit_root,
                     platform=None, jobs_text="2", launcher_text="none", install_text="none",
                     build_dir=build_dir, as_json=True) == 0
    assert (build_dir / "zc.draft.toml").is_file()
    wheels = list((build_dir / "dist-setuptools").glob("zc-0.1-*.whl"))
    assert wheels, "pip wrote no wheel"
    assert sorted(p.name for p in tree.rglob("*")) == ["__init__.py", "csrc", "k.cu",
                                                      "setup.py", "zc"]
