"""THC, torch's CUDA library before ATen, which torch 1.11 removed, and AT_CHECK, which 1.5 did
(tests/fixtures/torchapi/thc; Pointnet2.PyTorch's src/*.cpp, whose build stopped at
"THC/THC.h: No such file or directory"): scan FB125 finds each line of code that uses it,
recipe init drafts the edits that have a one-for-one successor, `flashbuild patch` applies
them, and where a CUDA build of torch's headers is at hand g++ compiles the patched unit."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashbuild.cli import app
from flashbuild.scanning.findings import ScanOptions, make_target
from flashbuild.scanning.scan import scan_tree

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "torchapi" / "thc"


def _headers() -> list[Path] | None:
    """torch's include folders and a CUDA include folder with cuBLAS's and cuSPARSE's headers
    (ATen/cuda/Exceptions.h includes them), from this Python's wheels; None when missing."""
    site = next((Path(p) for p in sys.path if (Path(p) / "torch" / "include").is_dir()), None)
    if site is None:
        return None
    cuda = next((p.parent for p in (site / "nvidia").glob("*/include/cublas_v2.h")
                 if (p.parent / "cusparse.h").is_file() and
                 (p.parent / "cuda_runtime.h").is_file()), None)
    if cuda is None:
        return None
    include = site / "torch" / "include"
    return [include, include / "torch" / "csrc" / "api" / "include", cuda,
            Path(sysconfig.get_paths()["include"])]


def _patched(tmp_path: Path) -> Path:
    """The fixture copied and patched with recipe init's draft; the patched tree."""
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURE, tree)
    draft = tmp_path / "draft.toml"
    runner = CliRunner()
    made = runner.invoke(app, ["recipe", "init", "--source", str(tree), "--platform", "linux",
                               "--arch", "sm_90a", "--static", "-o", str(draft)])
    assert made.exit_code == 0, made.output
    assert "could not make this edit" not in draft.read_text(encoding="utf-8")
    done = runner.invoke(app, ["patch", "--recipe", str(draft), "--source", str(tree),
                               "--platform", "linux", "--arch", "sm_90a"])
    assert done.exit_code == 0, done.output
    return tree


def test_thc_lines_are_found_and_drafted(tmp_path: Path) -> None:
    result = scan_tree(FIXTURE, make_target("linux", "sm_90a"), ScanOptions(static=True, jobs=1))
    found = {(f.path, f.line): f for f in result.findings if f.rule == "FB125"}
    # Every line of code with a THC name, none in the comment.
    assert sorted(found) == [("src/blas.cpp", 1), ("src/blas.cpp", 33), ("src/blas.cpp", 53),
                             ("src/cpu.cpp", 1), ("src/cpu.cpp", 5), ("src/format.cpp", 1),
                             ("src/format.cpp", 4), ("src/format.cpp", 7),
                             ("src/legacy.cpp", 1), ("src/legacy.cpp", 3),
                             ("src/ops.cpp", 2), ("src/ops.cpp", 6), ("src/ops.cpp", 10),
                             ("src/ops.cpp", 11), ("src/ops.cpp", 12), ("src/ops.cpp", 13),
                             ("src/ops.cpp", 14), ("src/ops.cpp", 19), ("src/ops.cpp", 20),
                             ("src/ops.cpp", 25), ("src/ops.cpp", 26), ("src/ops.cpp", 32),
                             ("src/ops.cpp", 33), ("src/ops.cpp", 39), ("src/user.cu", 4),
                             ("src/user.cu", 5)]
    # AT_CHECK (FB126): each line of code, the spaced call too, none in the comment.
    assert sorted(f.line for f in result.findings if f.rule == "FB126") == [5, 6, 8]
    # compat.cu defines AT_CHECK and THCudaCheck itself: nothing to report, nothing to edit;
    # nor in shims.cuh, which defines THC names as functions (and prints one in a string).
    assert [f for f in result.findings if f.path in ("src/compat.cu", "src/shims.cuh")] == []
    # user.cu takes THC names from a header of the tree and includes no THC header: said as a
    # warning, never edited (the successors' headers would not be there).
    user = [f for f in result.findings if f.path == "src/user.cu"]
    assert [(f.line, f.severity.value) for f in user] == [(4, "warning"), (5, "warning")]
    assert all(f.fix.step.step is None for f in user)  # type: ignore[union-attr]
    # A printf-style THArgCheck message would print its `%d` as is through TORCH_CHECK.
    (fmt,) = [f for f in result.findings if f.path == "src/format.cpp" and f.line == 4]
    assert fmt.fix.step.step is None  # type: ignore[union-attr]
    # A #define of another name whose body uses THC is code: found and edited.
    (body,) = [f for f in result.findings if f.path == "src/format.cpp" and f.line == 7]
    assert body.fix.step.step is not None  # type: ignore[union-attr]
    # THCudaTensor has no one-for-one successor: a finding for a person.
    assert found[("src/legacy.cpp", 3)].fix.step.step is None  # type: ignore[union-attr]
    tree = _patched(tmp_path)
    ops = (tree / "src" / "ops.cpp").read_text(encoding="utf-8")
    checks = (tree / "src" / "checks.h").read_text(encoding="utf-8")
    assert [ln for ln in checks.splitlines() if "AT_CHECK" in ln.split("//")[0]] == []
    assert checks.count("TORCH_CHECK") == 3
    for untouched in ("compat.cu", "shims.cuh", "user.cu"):
        assert (tree / "src" / untouched).read_text(encoding="utf-8") == \
            (FIXTURE / "src" / untouched).read_text(encoding="utf-8")
    assert [ln for ln in ops.splitlines() if "THC" in ln.split("//")[0]] == []
    # The same line at another indentation (line 32) is the same step, not a second one
    # that would find its lines already edited.
    # (the batched GEMM's helper, below, calls it once more)
    assert ops.count("at::cuda::getCurrentCUDAStream()") == 3 + 1
    assert "c10::cuda::CUDACachingAllocator::raw_alloc(n * sizeof(float))" in ops
    assert "c10::cuda::CUDACachingAllocator::raw_delete(scratch)" in ops
    assert "at::ceil_div(n, 256)" in ops and ops.count("C10_CUDA_CHECK(") == 3 + 4
    # THArgCheck loses its argument number, not a comma inside the condition.
    assert 'TORCH_CHECK(n > 0 && (n % 2, true), "n must be positive, got ", n);' in ops
    # THC's BLAS calls become helpers the include's edit defines, once: ATen's own
    # at::cuda::blas::gemm compiles but is not exported by libtorch_cuda (the module would not
    # load).
    assert "flashbuild_blas_gemm<float>(at::Device(at::kCUDA, c10::cuda::current_device()), " \
        "'n', 't', n, n, n, 1.0f," in ops
    assert "at::cuda::blas::" not in ops
    assert "flashbuild_blas_gemm_batched<float>('n', 'n', n, n, n, 1.0f," in ops
    assert ops.count("static inline void flashbuild_blas_gemm_batched(") == 1
    assert ops.count("static inline void flashbuild_blas_gemm(") == 1
    cpu = (tree / "src" / "cpu.cpp").read_text(encoding="utf-8")
    assert cpu.startswith("#include <ATen/ATen.h>\n")
    assert 'TORCH_CHECK(t.dim() == 2, "2-D input expected");' in cpu


def test_the_patched_unit_compiles_against_torch(tmp_path: Path) -> None:
    headers = _headers()
    if headers is None or shutil.which("g++") is None:
        pytest.skip("needs g++ and a CUDA build of torch with cuBLAS's headers in this Python")
    tree = _patched(tmp_path)
    for unit in ("ops.cpp", "cpu.cpp", "blas.cpp"):
        compiled = subprocess.run(
            ["g++", "-std=c++20", "-fsyntax-only", *(f"-I{h}" for h in headers),
             str(tree / "src" / unit)], capture_output=True, text=True, timeout=600,
            check=False)
        assert compiled.returncode == 0, compiled.stderr[-3000:]


def test_th_blas_successors_compute_what_th_computed(tmp_path: Path) -> None:
    """TH's CPU BLAS calls (DCNv2's CPU half), drafted as helpers over ATen: the patched unit
    is compiled and linked against this Python's torch and run, its own loops checking every
    transpose pair, padded leading dimensions and beta (a NaN in C that beta 0 must ignore)."""
    site = next((Path(p) for p in sys.path if (Path(p) / "torch" / "lib").is_dir()), None)
    if site is None or shutil.which("g++") is None:
        pytest.skip("needs g++ and torch in this Python")
    tree = _patched(tmp_path)
    blas = (tree / "src" / "blas.cpp").read_text(encoding="utf-8")
    assert "flashbuild_blas_gemm<float>(at::kCPU, ta, tb, m, n, k, 2.0f," in blas
    assert "flashbuild_blas_gemv<double>(at::kCPU, t, m, n, 0.5," in blas
    # A CPU file gets no CUDA header: a CPU-only build of the tree still compiles.
    assert "cuda" not in blas.split("int blas_mismatches")[0].lower()
    main = tmp_path / "main.cpp"
    main.write_text("#include <cstdio>\nint blas_mismatches();\n"
                    "int main() { std::printf(\"%d\\n\", blas_mismatches()); }\n",
                    encoding="utf-8")
    torch_dir = site / "torch"
    program = tmp_path / "blas"
    compiled = subprocess.run(
        ["g++", "-std=c++20", "-O1", f"-I{torch_dir / 'include'}",
         f"-I{torch_dir / 'include' / 'torch' / 'csrc' / 'api' / 'include'}",
         str(tree / "src" / "blas.cpp"), str(main), f"-L{torch_dir / 'lib'}", "-ltorch_cpu",
         "-lc10", f"-Wl,-rpath,{torch_dir / 'lib'}", "-o", str(program)],
        capture_output=True, text=True, timeout=600, check=False)
    assert compiled.returncode == 0, compiled.stderr[-3000:]
    ran = subprocess.run([str(program)], capture_output=True, text=True, timeout=120,
                         check=False)
    assert (ran.returncode, ran.stdout.strip()) == (0, "0"), ran.stderr[-3000:]
