"""`source.preprocess` on recorded tool output: the passes `nvcc --dryrun` lists, the lines a
pass keeps (from gcc -E line markers), the headers a `-M -MG` rule names as missing."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from flashbuild.arch import parse_arch
from flashbuild.runner import Completed
from flashbuild.source.preprocess import (
    Preprocessor,
    Stubs,
    Toolchain,
    Unit,
    missing_headers,
    parse_dryrun,
    preprocessor_flags,
    run_stubbing,
    survivors,
)

#: nvcc 13.0.88 `--dryrun -c d.cu -gencode arch=compute_120,code=sm_120 -gencode
#: arch=compute_90a,code=sm_90a -O3 -DFOO=1 -I/tmp/inc`, recorded (paths shortened, cicc
#: lines cut).
DRYRUN = (Path(__file__).resolve().parents[1] / "fixtures" / "scan" /
          "nvcc-13.0-dryrun.txt").read_text(encoding="utf-8")


def test_dryrun_lists_the_host_pass_and_one_pass_per_device_arch() -> None:
    passes = parse_dryrun(DRYRUN)
    assert [(name, arch) for name, arch, _argv in passes] == \
        [("host", None), ("sm_120", 1200), ("sm_90", 900)]
    for _name, _arch, argv in passes:
        assert "-o" not in argv  # the output goes to stdout
        assert argv[0] == "gcc" and "-E" in argv
    assert passes[0][2][passes[0][2].index("-D"):][:2] == ["-D", "FOO=1"]


def test_survivors_reads_line_markers(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    output = "\n".join([
        f'# 1 "{root}/k.cu"',
        '# 1 "/usr/include/stdio.h" 1 3',
        "int printf(const char*, ...);",
        f'# 3 "{root}/k.cu" 2',
        "__global__ void k() {",
        "",
        "  asm(\"x\");",
        f'# 12 "{root}/inc/w.cuh" 1',
        "void w();",
        '# 1 "k.cu"',
        "int rel;",
    ])
    lines, files = survivors(output, root)
    assert lines == {"k.cu": frozenset({1, 3, 5}), "inc/w.cuh": frozenset({12})}
    assert files == ["inc/w.cuh", "k.cu"]


def test_missing_headers_from_a_make_rule(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text("", encoding="utf-8")
    rule = (f"k.o: {tmp_path}/k.cu /usr/include/stdio.h \\\n torch/extension.h \\\n"
            " cuda/std/utility k.cu ../up.h\n")
    assert missing_headers(rule, tmp_path) == ["torch/extension.h", "cuda/std/utility"]


def test_only_preprocessor_flags_are_kept_with_their_values() -> None:
    flags = ["-O3", "-gencode", "arch=compute_90a,code=sm_90a", "-D", "X=1", "-DY",
             "-isystem", "/opt/inc", "--expt-relaxed-constexpr", "-std=c++20", "-Xcompiler",
             "-fPIC", "-U__CUDA_NO_HALF_OPERATORS__", "--use_fast_math"]
    assert preprocessor_flags(flags) == ["-D", "X=1", "-DY", "-isystem", "/opt/inc",
                                         "--expt-relaxed-constexpr", "-std=c++20",
                                         "-U__CUDA_NO_HALF_OPERATORS__"]


def test_a_hanging_preprocessor_is_a_failed_pass_not_a_crash(tmp_path: Path) -> None:
    from flashbuild.arch import parse_arch_spec
    from flashbuild.errors import ProcessTimeout
    from flashbuild.proc import Completed
    from flashbuild.source.preprocess import Preprocessor, Toolchain, Unit

    class Hangs:
        def run(self, argv: list[str], **_kw: object) -> Completed:
            if "--dryrun" in argv:
                return Completed(tuple(argv), 0, DRYRUN, "")
            raise ProcessTimeout("`gcc` did not finish within 300 s")

        def which(self, program: str, env: object = None) -> str | None:
            return program

    (tmp_path / "k.cu").write_text("__global__ void k() {}\n", encoding="utf-8")
    pp = Preprocessor(tmp_path, Toolchain(tmp_path / "nvcc", tmp_path, "13.0"), Hangs(),
                      cache_dir=None)
    out = pp.run([Unit("k.cu")], parse_arch_spec("sm120").archs[0], windows=True)
    passes = out["k.cu"]
    assert [p.name for p in passes] == ["host", "host (Windows, emulated)", "sm_120", "sm_90"]
    assert all(not p.ok and "did not finish" in p.error for p in passes)


def test_run_counts_the_units_as_they_finish_and_keeps_their_order(tmp_path: Path) -> None:
    # Issue 28: the scan's status line counts the preprocessed units ("[2/3]").
    from flashbuild.arch import parse_arch_spec
    from flashbuild.errors import ProcessTimeout
    from flashbuild.proc import Completed
    from flashbuild.source.preprocess import Preprocessor, Toolchain, Unit

    class Fails:
        def run(self, argv: list[str], **_kw: object) -> Completed:
            if "--dryrun" in argv:
                return Completed(tuple(argv), 0, DRYRUN, "")
            raise ProcessTimeout("`gcc` did not finish within 300 s")

        def which(self, program: str, env: object = None) -> str | None:
            return program

    names = ["c.cu", "a.cu", "b.cu"]
    for name in names:
        (tmp_path / name).write_text("__global__ void k() {}\n", encoding="utf-8")
    pp = Preprocessor(tmp_path, Toolchain(tmp_path / "nvcc", tmp_path, "13.0"), Fails(),
                      cache_dir=None, jobs=2)
    done: list[int] = []
    out = pp.run([Unit(n) for n in names], parse_arch_spec("sm120").archs[0], windows=False,
                 kinds=frozenset({"device"}), on_done=done.append)
    assert done == [1, 2, 3]
    assert list(out) == names


class _FakeGcc:
    """A preprocessor that lacks `missing` headers: `-M -MG` names them, a pass stops at the
    first one not found in the stubs' folder (-idirafter), else prints a line marker per stub
    it included."""

    def __init__(self, missing: tuple[str, ...]) -> None:
        self.missing = missing
        self.calls: list[str] = []

    def which(self, program: str, env: object = None) -> str | None:
        return None  # no coreutils `timeout` to wrap the runs in

    def run(self, argv: Sequence[str], **_kwargs: object) -> Completed:
        folder = Path(next(a for a in argv if a.startswith("-idirafter"))[len("-idirafter"):])
        if "-MG" in argv:
            self.calls.append("probe")
            return Completed(tuple(argv), 0, "u.o: u.cpp " + " ".join(self.missing), "")
        self.calls.append("pass")
        for header in self.missing:
            if not (folder / header).is_file():
                return Completed(tuple(argv), 1, "",
                                 f"u.cpp:1:10: fatal error: {header}: No such file or directory")
        return Completed(tuple(argv), 0, "".join(f'# 1 "{folder}/{h}" 1\n' for h in
                                                 self.missing) + "int x;\n", "")


def test_a_pass_with_every_header_runs_once_without_a_probe(tmp_path: Path) -> None:
    # torch/extension.h on this machine: the probe would cost as much as the pass.
    gcc = _FakeGcc(())
    done = run_stubbing(gcc, ["g++", "-E", "u.cpp"], Stubs(tmp_path), cwd=tmp_path)
    assert done.returncode == 0 and gcc.calls == ["pass"]


def test_a_missing_header_is_probed_once_and_every_missing_one_stubbed(tmp_path: Path) -> None:
    gcc = _FakeGcc(("cublas_v2.h", "c10/cuda/x.h"))
    stubs = Stubs(tmp_path / "a")
    (tmp_path / "u.cpp").write_text("", encoding="utf-8")
    done = run_stubbing(gcc, ["g++", "-E", "u.cpp"], stubs, cwd=tmp_path)
    assert done.returncode == 0 and gcc.calls == ["pass", "probe", "pass"]
    assert stubs.used(done.stdout) == ["cublas_v2.h", "c10/cuda/x.h"]
    # probe_first (a tree's first unit): the probe, then one pass.
    gcc = _FakeGcc(("cublas_v2.h",))
    done = run_stubbing(gcc, ["g++", "-E", "u.cpp"], Stubs(tmp_path / "b", probe_first=True),
                        cwd=tmp_path)
    assert done.returncode == 0 and gcc.calls == ["probe", "pass"]


def test_lines_are_counted_by_newline_as_the_preprocessor_counts_them(tmp_path: Path) -> None:
    # A form feed or a vertical tab inside a line is no line break for gcc (str.splitlines
    # took it for one and shifted every later line of the file).
    output = "\n".join([f'# 7 "{tmp_path}/k.cu"', "int a;\f int b;", "int c;\v", "", "int d;"])
    lines, _files = survivors(output, tmp_path)
    assert lines == {"k.cu": frozenset({7, 8, 10})}


class _BigOutputRunner:
    """nvcc's recorded `--dryrun` listing, then passes whose stdout lost its start."""

    def __init__(self, dropped: int, unit: Path) -> None:
        self.dropped, self.unit = dropped, unit

    def which(self, name: str, env: object = None) -> None:
        return None

    def run(self, argv: Sequence[str], **_kw: object) -> Completed:
        if "--dryrun" in argv:
            return Completed(tuple(argv), 0, "", DRYRUN)
        tail = f'# 1 "{self.unit}"\nint k;\n'
        return Completed(tuple(argv), 0, tail, "", stdout_dropped=self.dropped)


def test_a_pass_whose_output_lost_its_start_is_no_verdict(tmp_path: Path) -> None:
    """Past 32 MiB a run keeps only the tail of stdout; read as the whole, the lines of every
    header read first would count as not compiled. Such a pass is a failed one."""
    (tmp_path / "k.cu").write_text("int k;\n", encoding="utf-8")
    toolchain = Toolchain(Path("/cuda/bin/nvcc"), Path("/cuda/include"), "13.0")
    for dropped, ok in ((0, True), (40 << 20, False)):
        pp = Preprocessor(tmp_path, toolchain, _BigOutputRunner(dropped, tmp_path / "k.cu"),  # type: ignore[arg-type]
                          None, jobs=1)
        (result,) = pp.run([Unit("k.cu")], parse_arch("sm_120").arch, windows=False,
                           kinds=frozenset({"cuda-host"}))["k.cu"]
        assert result.ok is ok, result
        assert ("does not hold" in result.error) is not ok
        assert result.lines == ({"k.cu": frozenset({1})} if ok else {})
