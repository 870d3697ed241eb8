"""Time an unchanged re-run of `flashbuild build TREE --arch X` (no `--recipe`) side by side for
three tree shapes, each padded with untouched files to the size of the seed trees:

- `zero-config setup.py`: a torch cpp_extension tree no recipe matches (drafted);
- `bundled setup.py`: a tree with causal-conv1d's identity (the bundled recipe, chosen by
  content);
- `CMake`: the minikern fixture without its recipe (drafted, configured, built with Ninja).

Each tree is built once (cold), then re-run N times; the table gives the median wall time of a
fresh `python -m flashbuild build ...` process and says whether it printed "nothing to compile".
`--baseline DIR` (a folder holding another version's `flashbuild/` and `recipes/`, e.g. from
`git archive OLD flashbuild recipes | tar -x -C DIR`) times that version too, interleaved run by
run with this checkout, so load on the machine hits both alike; each version keeps its own
build folder (`--build-dir`), since the setup.py stamp counts PYTHONPATH as part of the build.

    python bench/bench_noop.py [--runs 5] [--pad 1500] [--arch sm_90a] [--cuda ROOT]
                               [--baseline DIR]

On a CPU-only torch the setuptools backend refuses to build before it starts (torch has no CUDA):
for the setup.py rows the CLI is started through a two-line wrapper that turns that one check
off (`check_torch_cuda`); the setup.py links without torch's `*_cuda` libraries, as the
integration tests' fixtures do. Everything else is the real command. The packages are installed
with `--install none`, so the bench leaves the environment as it was.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MINIKERN = ROOT / "tests" / "fixtures" / "build" / "minikern"

#: The CLI with the CPU-only-torch check off (bench scaffolding, see the module docstring).
CLI_CPU_TORCH = ("import flashbuild.building.backends.setuptools as st; "
                 "st.check_torch_cuda = lambda torch, request: None; "
                 "import sys; from flashbuild.cli import main; sys.argv[0] = 'flashbuild'; "
                 "sys.exit(main())")

SETUP = """from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

ext = CUDAExtension(name="{pkg}.{mod}", sources=["csrc/{cu}"])
# Bench scaffolding: a CPU-only torch has no *_cuda libraries; without them the link succeeds.
ext.libraries = [lib for lib in ext.libraries if not lib.endswith("_cuda")]
setup(name="{pkg}", version="0.1", packages=["{pkg}"], ext_modules=[ext],
      cmdclass={{"build_ext": BuildExtension}})
"""


def _pad(tree: Path, count: int) -> None:
    """`count` untouched header files in a vendored-library-shaped folder (CUTLASS-like)."""
    for i in range(count):
        folder = tree / "third_party" / "lib" / "include" / f"part{i // 100}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"h{i}.h").write_text(f"#pragma once\n// filler {i}\n")


def setup_tree(where: Path, *, pkg: str, mod: str, cu: str, extra: tuple[str, ...] = ()) -> Path:
    tree = where / pkg.replace("_", "-")
    (tree / "csrc").mkdir(parents=True)
    (tree / pkg).mkdir()
    (tree / pkg / "__init__.py").write_text(f"from {pkg} import {mod}\n")
    (tree / "setup.py").write_text(SETUP.format(pkg=pkg, mod=mod, cu=cu))
    (tree / "csrc" / cu).write_text('extern "C" __global__ void k(float* x) {}\n')
    for rel in extra:
        (tree / rel).write_text("// marker\n")
    return tree


def make_trees(where: Path, pad: int) -> dict[str, tuple[Path, bool]]:
    """name -> (tree, needs the CPU-torch wrapper)."""
    zc = setup_tree(where, pkg="zc", mod="_C", cu="k.cu")
    cc = setup_tree(where, pkg="causal_conv1d", mod="causal_conv1d_cuda",
                    cu="causal_conv1d_fwd.cu", extra=("csrc/causal_conv1d.cpp",))
    cm = where / "cm"
    shutil.copytree(MINIKERN, cm)
    (cm / "minikern.toml").unlink()
    for tree in (zc, cc, cm):
        _pad(tree, pad)
    return {"zero-config setup.py": (zc, True), "bundled setup.py (causal-conv1d)": (cc, True),
            "zero-config CMake (minikern)": (cm, False)}


def command(tree: Path, build_dir: Path, *, wrapper: bool, arch: str,
            cuda: str | None) -> list[str]:
    head = [sys.executable, "-c", CLI_CPU_TORCH] if wrapper else \
        [sys.executable, "-m", "flashbuild"]
    return [*head, "build", str(tree), "--arch", arch, "--install", "none",
            "--build-dir", str(build_dir), *(["--cuda", cuda] if cuda else [])]


def run(argv: list[str], *, code: Path = ROOT) -> tuple[float, str]:
    """One run of `argv` with the flashbuild in `code` first on the path (from a neutral
    folder, so the current directory shadows nothing)."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env,
                          cwd=code.anchor)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, done.stdout + done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--pad", type=int, default=1500,
                        help="untouched files added to each tree (the seed trees hold "
                        "1000-1900)")
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--cuda", default=None, help="toolkit root (default: doctor's choice)")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="another version's checkout to time alongside this one")
    args = parser.parse_args()
    versions = {"this checkout": ROOT}
    if args.baseline is not None:
        versions = {"baseline": args.baseline.resolve(), **versions}
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-noop-") as tmp:
        for name, (tree, wrapper) in make_trees(Path(tmp), args.pad).items():
            argvs = {v: command(tree, Path(tmp) / f"build-{tree.name}-{i}", wrapper=wrapper,
                                arch=args.arch, cuda=args.cuda)
                     for i, v in enumerate(versions)}
            colds = {v: run(argvs[v], code=code)[0] for v, code in versions.items()}
            times: dict[str, list[float]] = {v: [] for v in versions}
            noop = True
            for _ in range(args.runs):
                for version, code in versions.items():
                    seconds, out = run(argvs[version], code=code)
                    times[version].append(seconds)
                    noop = noop and "nothing to compile" in out
            files = sum(1 for p in tree.rglob("*") if p.is_file())
            for version, got in times.items():
                rows.append((name, version, files, colds[version], statistics.median(got),
                             min(got), max(got), noop))
    print(f"unchanged re-runs of `flashbuild build TREE --arch {args.arch} --install none`, "
          f"median of {args.runs} (python {sys.version.split()[0]})")
    print("| tree | flashbuild | files | cold build (s) | re-run median (s) | min | max | "
          "nothing to compile |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for name, version, files, cold, med, lo, hi, noop in rows:
        print(f"| {name} | {version} | {files} | {cold:.1f} | {med:.2f} | {lo:.2f} | {hi:.2f} | "
              f"{'yes' if noop else 'NO'} |")


if __name__ == "__main__":
    main()
