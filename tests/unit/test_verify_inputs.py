"""verify without a manifest: one binary, a folder, a wheel, an installed package (found from
its distribution's files), the arch proof, the recipe's kernels, torch extensions' libraries.
All on the committed fixture binaries (tests/fixtures/verify, see make_fixtures.sh)."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashbuild.arch import parse_arch_spec
from flashbuild.errors import UsageError, VerifyError
from flashbuild.platforms import get
from flashbuild.verifying import binaries
from flashbuild.verifying.inputs import open_subject
from flashbuild.verifying.verify import Status, VerifyReport, verify_install
from tests.fakes import ReplayRunner

V = Path(__file__).resolve().parent.parent / "fixtures" / "verify"
EXT = ".cpython-311-x86_64-linux-gnu.so"


def run(path: Path | None = None, arch: str | None = None, *, package: str | None = None,
        strict: bool = True, kernels: tuple[str, ...] | None = None,
        platform: str = "linux", preloaded: tuple[Path, ...] = ()) -> VerifyReport:
    runner = ReplayRunner()
    runner.add("ldconfig", "-p", out=(V / "ldconfig-p.txt").read_text())
    return verify_install(path=path, package=package,
                          targets=parse_arch_spec(arch) if arch else None, strict_arch=strict,
                          kernels=kernels, runner=runner, platform=get(platform),
                          env={"PATH": "/usr/bin"}, import_module=False, run_gpu=False,
                          preloaded_dirs=preloaded)


def summaries(report: VerifyReport, status: Status) -> list[str]:
    return [c.summary for c in report.checks if c.status is status]


def make_wheel(path: Path, members: dict[str, bytes], *, dist_info: bool = True) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        if dist_info:
            zf.writestr("kern-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: "
                        "false\nTag: cp311-cp311-linux_x86_64\n")
            zf.writestr("kern-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: kern\n"
                        "Version: 1.0\n")
    return path


def test_a_relative_path_to_one_binary_works_without_a_manifest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(V.parent)
    report = run(Path("verify/sass_sm90a.o"), "sm_90a")
    assert report.ok, report.failures
    assert report.subject_kind == "binary" and report.subject == str(V / "sass_sm90a.o")
    assert report.manifest_path is None
    assert "sm_90a SASS present" in summaries(report, Status.OK)
    assert "import not checked" in summaries(report, Status.SKIP)
    (proof,) = report.binaries
    assert proof.to_json()["sass"] == ["sm_90a"] and proof.missing == proof.extra == ()


def test_one_binary_for_another_arch_fails_missing_and_extra() -> None:
    report = run(V / "sass_sm90a.o", "sm_80")
    assert summaries(report, Status.FAIL) == ["asked for sm_80, found no sm_80 SASS",
                                              "extra archs (not asked for): sm_90a"]
    assert report.to_json()["binaries"][0]["missing"] == ["sm_80"]  # type: ignore[index]


def test_no_arch_and_no_manifest_lists_images_without_judging() -> None:
    report = run(V / "multi.o")
    assert report.ok and report.targets == "none given"
    assert "no target arch: images listed, not judged" in summaries(report, Status.SKIP)
    (proof,) = report.binaries
    assert proof.sass == ("sm_90a", "sm_100f", "sm_120a") and proof.ptx == ("compute_120a",)
    assert proof.extra == () and proof.missing == ()


def test_non_strict_lists_extra_archs_as_a_warning() -> None:
    report = run(V / "multi.o", "sm_120a", strict=False)
    assert report.ok, report.failures
    assert "extra archs (not asked for): sm_90a, sm_100f" in summaries(report, Status.WARN)
    # PTX for the target's own compute arch is allowed, and said.
    assert any("compute_120a PTX (the target's own compute arch: allowed)" in s
               for s in summaries(report, Status.OK))
    assert report.binaries[0].extra == ("sm_90a", "sm_100f")


def test_a_named_binary_without_gpu_code_fails(tmp_path: Path) -> None:
    report = run(V / "helper.dll", "sm_120", platform="windows")
    assert "holds no GPU code" in summaries(report, Status.FAIL)


def test_a_folder_judges_each_binary_and_a_host_only_helper_is_a_warning(
        tmp_path: Path) -> None:
    folder = tmp_path / "dist" / "pkg"
    (folder / "sub").mkdir(parents=True)
    shutil.copy(V / "kern.dll", folder / "kern.pyd")
    shutil.copy(V / "helper.dll", folder / "sub" / "helper.dll")
    (folder / "README.txt").write_text("not a binary")
    report = run(folder, "sm_120", platform="windows")
    assert report.subject_kind == "folder"
    assert [b.subject for b in report.binaries] == ["kern.pyd", "sub/helper.dll"]
    assert "host-only: holds no GPU code" in summaries(report, Status.WARN)
    assert "sm_120 SASS present" in summaries(report, Status.OK)
    # kern.pyd imports flashbuild_gone.dll, which is nowhere: named, as with a manifest.
    assert "needs flashbuild_gone.dll: not found" in summaries(report, Status.FAIL)
    assert "a folder without __init__.py" in next(
        c.evidence for c in report.checks if c.area == "import")


def test_a_folder_whose_binaries_hold_no_gpu_code_fails(tmp_path: Path) -> None:
    shutil.copy(V / "helper.dll", tmp_path / "helper.dll")
    report = run(tmp_path, "sm_120", platform="windows")
    assert "no binary holds GPU code" in summaries(report, Status.FAIL)


def test_a_wheel_is_read_without_installing(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "kern-1.0-cp311-cp311-linux_x86_64.whl", {
        "kern/__init__.py": b"raise SystemExit('never imported')\n",
        f"kern/_C{EXT}": (V / "sass_ptx_sm120.o").read_bytes()})
    report = run(wheel, "sm_120", kernels=("scale2", "stage"))
    assert report.ok, report.failures
    assert report.subject_kind == "wheel" and report.subject == str(wheel)
    doc = report.to_json()
    assert doc["binaries"] == [{
        "subject": f"kern/_C{EXT}", "path": doc["binaries"][0]["path"],  # type: ignore[index]
        "kind": "library", "format": "elf", "readable": True, "gpu_code": True,
        "sass": ["sm_120"], "ptx": ["compute_120"], "missing": [], "extra": []}]
    assert "all 2 listed kernels present in the sm_120 cubins" in summaries(report, Status.OK)
    assert "install it and run `flashbuild verify --package NAME`" in next(
        c.evidence for c in report.checks if c.area == "import")
    # The temp folder is gone once verify returns.
    assert not Path(str(doc["binaries"][0]["path"])).exists()  # type: ignore[index]


def test_a_listed_kernel_missing_from_the_target_cubins_fails() -> None:
    report = run(V / "multi.o", "90a;120a", kernels=("stage", "rms_norm_kernel"))
    fails = [c for c in report.failures if c.area == "kernels"]
    assert [c.summary for c in fails] == [
        "kernels missing from the sm_90 cubins: rms_norm_kernel",
        "kernels missing from the sm_120 cubins: rms_norm_kernel"]
    assert "_Z5stagePfi" in fails[0].evidence and "[verify] kernels" in fails[0].fix


def test_kernels_from_the_manifest(tmp_path: Path) -> None:
    from flashbuild.installing.manifest import Artifact, HostCompiler, Manifest, Toolkit

    pkg = tmp_path / "flashkern"
    pkg.mkdir()
    shutil.copy(V / "sass_sm90a.o", pkg / "m.o")
    Manifest(flashbuild="0.1.0", recipe="csrc", platform="linux", archs=("sm_90a",),
             toolkit=Toolkit(root="/cuda", version="13.0"),
             host_compiler=HostCompiler(kind="gcc", version="12", path="/usr/bin/g++"),
             artifacts=(Artifact(path="m.o", kind="module"),),
             kernels=("scale2", "softmax_tiled_kernel")).write(pkg)
    assert Manifest.load(pkg).kernels == ("scale2", "softmax_tiled_kernel")
    report = run(pkg)
    assert [c.summary for c in report.failures] == [
        "kernels missing from the sm_90 cubins: softmax_tiled_kernel"]


def test_compressed_cubins_are_read_for_kernel_names() -> None:
    report = run(V / "compressed_sm90.o", "sm_90", kernels=("scale2",))
    assert "all 1 listed kernels present in the sm_90 cubins" in summaries(report, Status.OK)


def test_torch_libraries_resolve_from_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lib = tmp_path / "site" / "torch" / "lib"
    lib.mkdir(parents=True)
    for name in ("libc10.so", "libtorch_cuda.so"):
        (lib / name).write_bytes(b"")
    monkeypatch.setattr(binaries, "read_link_info", lambda path: binaries.LinkInfo(
        path, "elf", ("libc10.so", "libtorch_cuda.so", "libnowhere.so")))
    report = run(V / "sass_sm90a.o", "sm_90a", preloaded=(lib,))
    # libc10 and libtorch_cuda come from torch's folder; the third is still missing.
    assert summaries(report, Status.FAIL) == ["needs libnowhere.so: not found"]
    # Without a torch library among its needs, nothing comes from torch's folder.
    monkeypatch.setattr(binaries, "read_link_info", lambda path: binaries.LinkInfo(
        path, "elf", ("libcudart.so.13",)))
    (lib / "libcudart.so.13").write_bytes(b"")
    report = run(V / "sass_sm90a.o", "sm_90a", preloaded=(lib,))
    assert summaries(report, Status.FAIL) == ["needs libcudart.so.13: not found"]


def test_torch_extension_resolves_fully(tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    lib = tmp_path / "torch" / "lib"
    lib.mkdir(parents=True)
    (lib / "libc10.so").write_bytes(b"")
    monkeypatch.setattr(binaries, "read_link_info", lambda path: binaries.LinkInfo(
        path, "elf", ("libc10.so",)))
    report = run(V / "sass_sm90a.o", "sm_90a", preloaded=(lib,))
    assert report.ok, report.failures
    ok = next(c for c in report.checks if c.area == "dependencies")
    assert ok.summary == "1 of 1 libraries resolve" and str(lib / "libc10.so") in ok.evidence


def make_installed(tmp_path: Path) -> Path:
    """A site folder with the distribution `fake-kern`: package `fakekern` and, beside it, a
    top-level extension `fakekern_cuda` (causal-conv1d's layout)."""
    site = tmp_path / "site"
    (site / "fakekern").mkdir(parents=True)
    (site / "fakekern" / "__init__.py").write_text("import fakekern_cuda\n")
    shutil.copy(V / "sass_ptx_sm120.o", site / f"fakekern_cuda{EXT}")
    info = site / "fake_kern-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-kern\nVersion: 0.1\n")
    (info / "top_level.txt").write_text("fakekern\nfakekern_cuda\n")
    (info / "RECORD").write_text(f"fakekern/__init__.py,,\nfakekern_cuda{EXT},,\n"
                                 "fake_kern-0.1.dist-info/METADATA,,\n")
    return site


@pytest.mark.parametrize("name", ["fakekern", "fake-kern"])
def test_an_installed_package_is_found_from_its_distribution(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    import sys

    site = make_installed(tmp_path)
    monkeypatch.syspath_prepend(str(site))
    report = run(package=name, arch="sm_120")
    assert report.ok, report.failures
    assert report.subject_kind == "package"
    assert [b.subject for b in report.binaries] == [f"fakekern_cuda{EXT}"]
    assert "fakekern" not in sys.modules  # found, not imported
    with open_subject(package=name) as subject:
        assert subject.package == "fakekern"


def test_an_unknown_package_is_a_clear_error() -> None:
    with pytest.raises(VerifyError, match="`no_such_pkg_x` is not installed") as err:
        run(package="no_such_pkg_x")
    assert "find_spec" in err.value.evidence and "flashbuild verify PATH" in err.value.fix


def test_a_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        run(tmp_path / "nope.so")


def test_cli_verify_a_relative_binary_json(monkeypatch: pytest.MonkeyPatch) -> None:
    from flashbuild import cli

    monkeypatch.setattr("flashbuild.verifying.verify.environment_lib_dirs", tuple)
    monkeypatch.setattr("flashbuild.verifying.binaries.ld_cache",
                        lambda runner, env=None: {})
    monkeypatch.chdir(V)
    result = CliRunner().invoke(cli.app, ["verify", "multi.o", "--arch", "sm_120a", "--json"])
    assert result.exit_code == 8, result.output
    doc = json.loads(result.stdout)
    assert doc["kind"] == "binary" and doc["strict_arch"] is True
    assert doc["binaries"][0]["extra"] == ["sm_90a", "sm_100f"]
    loose = CliRunner().invoke(cli.app, ["verify", "multi.o", "--arch", "sm_120a",
                                         "--no-strict-arch"])
    assert loose.exit_code == 0, loose.output
    assert "extra: sm_90a, sm_100f" in loose.stdout


def _probe(imported: bool = True) -> str:
    return "FLASHBUILD-PROBE " + json.dumps({"imported": imported, "missing": [],
                                             "error": None, "file": "/site/x/__init__.py",
                                             "torch": True})


@pytest.mark.parametrize("has_selfcheck", [False, True])
def test_gpu_self_check_runs_by_default_only_for_a_package_that_has_one(
        tmp_path: Path, has_selfcheck: bool) -> None:
    pkg = tmp_path / "site" / "kern"
    pkg.mkdir(parents=True)
    shutil.copy(V / "sass_sm90a.o", pkg / "_C.so")
    (pkg / "__init__.py").write_text("")
    if has_selfcheck:
        (pkg / "selfcheck.py").write_text("")
    runner = ReplayRunner()
    runner.add("ldconfig", "-p", out=(V / "ldconfig-p.txt").read_text())
    runner.add("python", out=_probe())
    report = verify_install(path=pkg, targets=parse_arch_spec("sm_90a"), runner=runner,
                            platform=get("linux"), env={"PATH": "/usr/bin"}, python="python",
                            preloaded_dirs=(), gpu_present=lambda: True)
    gpu = next(c for c in report.checks if c.area == "gpu")
    ran = [c for c in runner.calls if "kern.selfcheck" in c]
    if has_selfcheck:
        assert ran and gpu.status is Status.FAIL  # the replayed child printed no report
    else:
        assert not ran and gpu.status is Status.SKIP and "has no selfcheck module" in gpu.summary


def test_a_manifest_module_without_gpu_code_fails(tmp_path: Path) -> None:
    # Issue 12: "a module with no fatbin passes verify with a warning".
    from flashbuild.installing.manifest import Artifact, HostCompiler, Manifest, Toolkit

    pkg = tmp_path / "kern"
    pkg.mkdir()
    shutil.copy(V / "helper.dll", pkg / "_C.pyd")
    shutil.copy(V / "helper.dll", pkg / "plugin.dll")
    Manifest(flashbuild="0.1.0", recipe="x", platform="windows", archs=("sm_120",),
             toolkit=Toolkit(root="C:/cuda", version="13.0"),
             host_compiler=HostCompiler(kind="msvc", version="19.44", path="cl.exe"),
             artifacts=(Artifact(path="_C.pyd", kind="module"),
                        Artifact(path="plugin.dll", kind="plugin"))).write(pkg)
    report = run(pkg, platform="windows")
    images = [(c.subject, c.status, c.summary) for c in report.checks if c.area == "images"]
    assert images == [("_C.pyd", Status.FAIL, "holds no GPU code"),
                      ("plugin.dll", Status.WARN, "host-only: holds no GPU code")]
    assert "asked for sm_120" in report.failures[0].evidence


def test_cli_path_and_package_together_is_a_usage_error() -> None:
    from flashbuild import cli

    result = CliRunner().invoke(cli.app, ["verify", "x.so", "--package", "kern"])
    assert result.exit_code == 2, result.output
    assert "PATH and --package name two different things" in result.output


def _sm120_package(tmp_path: Path) -> tuple[Path, ReplayRunner]:
    """An installed package with a selfcheck module and an sm_120-only binary."""
    pkg = tmp_path / "site" / "kern"
    pkg.mkdir(parents=True)
    shutil.copy(V / "resources_sm120.o", pkg / "_C.so")
    (pkg / "__init__.py").write_text("")
    (pkg / "selfcheck.py").write_text("")
    runner = ReplayRunner()
    runner.add("ldconfig", "-p", out=(V / "ldconfig-p.txt").read_text())
    runner.add("python", out=_probe())
    return pkg, runner


@pytest.mark.parametrize("asked", [None, True])
def test_a_build_for_another_gpu_is_not_self_checked_on_this_one(tmp_path: Path,
                                                                 asked: bool | None) -> None:
    # Seen on an H200 with csrc built for sm_120 (the README's `build --arch sm120` then
    # `verify --arch sm120`): the self-check imported the package, the loader shim refused
    # it (rightly) and verify failed a correct build, exit 8.
    from flashbuild.installing.resources.loader_shim import Gpu

    pkg, runner = _sm120_package(tmp_path)
    h200 = Gpu(0, "NVIDIA H200", (9, 0))
    report = verify_install(path=pkg, targets=parse_arch_spec("sm_120"), runner=runner,
                            platform=get("linux"), env={"PATH": "/usr/bin"}, python="python",
                            preloaded_dirs=(), gpu_present=lambda: True, run_gpu=asked,
                            gpus_here=lambda env: [h200])
    gpu = next(c for c in report.checks if c.area == "gpu")
    assert not [c for c in runner.calls if "kern.selfcheck" in c]
    assert gpu.summary == "no GPU self-check: no GPU here can run this build"
    assert "NVIDIA H200, compute capability 9.0" in gpu.evidence
    # By default the static checks decide; `--gpu` asked for what cannot be done here.
    assert gpu.status is (Status.FAIL if asked else Status.SKIP)
    assert report.ok is (asked is None)


def test_a_gpu_that_runs_the_build_is_self_checked(tmp_path: Path) -> None:
    from flashbuild.installing.resources.loader_shim import Gpu

    pkg, runner = _sm120_package(tmp_path)
    rtx = Gpu(0, "NVIDIA GeForce RTX 5090", (12, 0))
    verify_install(path=pkg, targets=parse_arch_spec("sm_120"), runner=runner,
                   platform=get("linux"), env={"PATH": "/usr/bin"}, python="python",
                   preloaded_dirs=(), gpu_present=lambda: True, gpus_here=lambda env: [rtx])
    assert [c for c in runner.calls if "kern.selfcheck" in c]


def test_a_module_the_build_knew_was_host_only_is_a_warning(tmp_path: Path) -> None:
    # torch_spline_conv / torch_scatter's shape: a CppExtension `_basis_cpu` beside the
    # CUDAExtension `_basis_cuda`. The H200 run of 2026-11-28 built four such trees and
    # verify failed each ("holds no GPU code" on the CPU module). The setuptools backend now
    # marks the modules outside the hook's device-code extensions, and the manifest keeps it.
    from flashbuild.building.backends.setuptools import _artifacts, _device_extensions
    from flashbuild.installing.manifest import Artifact, HostCompiler, Manifest, Toolkit

    report_file = tmp_path / "hook.jsonl"
    report_file.write_text(json.dumps({"extension": "kern._C", "removed": [], "added": []})
                           + "\n" + json.dumps({"extension_lanes": 2}) + "\n")
    device = _device_extensions(report_file, tmp_path)
    assert device == {"kern._C"}
    out = tmp_path / "out" / "kern"
    out.mkdir(parents=True)
    cuda_mod, cpu_mod = out / f"_C{EXT}", out / f"_cpu{EXT}"
    cuda_mod.write_bytes(b""), cpu_mod.write_bytes(b"")

    class _Recipe:
        artifact: tuple[object, ...] = ()

    class _Request:
        recipe = _Recipe()

    built = _artifacts(_Request(), [cuda_mod, cpu_mod], None, device)  # type: ignore[arg-type]
    assert [(a.name, a.gpu_code) for a in built] == [("kern._C", True), ("kern._cpu", False)]
    # setup.py's `ext_package = "kern"` with `Extension("_C", ...)`: the hook saw `_C`.
    assert [a.gpu_code for a in _artifacts(_Request(), [cuda_mod, cpu_mod], None,  # type: ignore[arg-type]
                                           frozenset({"_C"}))] == [True, False]
    # No names from the hook (no report): every module must hold GPU code, as before.
    assert all(a.gpu_code for a in _artifacts(_Request(), [cpu_mod], None))  # type: ignore[arg-type]

    pkg = tmp_path / "kern"
    pkg.mkdir()
    shutil.copy(V / "sass_sm90a.o", pkg / "_C.so")
    shutil.copy(V / "sass_sm90a.o", pkg / "_cuda_too.so")
    (pkg / "_cpu.so").write_bytes(_host_only_elf())
    manifest = Manifest(
        flashbuild="0.1.0", recipe="kern", platform="linux", archs=("sm_90a",),
        toolkit=Toolkit(root="/cuda", version="13.0"),
        host_compiler=HostCompiler(kind="gcc", version="12", path="/usr/bin/g++"),
        artifacts=(Artifact(path="_C.so", kind="module"),
                   Artifact(path="_cpu.so", kind="module", gpu_code=False)))
    manifest.write(pkg)
    text = (pkg / "flashbuild-manifest.json").read_text()
    assert text.count('"gpu_code"') == 1 and '"gpu_code": false' in text
    assert Manifest.load(pkg) == manifest
    images = [(c.subject, c.status, c.summary) for c in run(pkg).checks
              if c.area == "images" and c.subject == "_cpu.so"]
    assert images == [("_cpu.so", Status.WARN, "host-only: holds no GPU code")]


def _host_only_elf() -> bytes:
    """The smallest well-formed x86-64 ELF shared object with no GPU code: its header, a
    section name table and two section headers (the null one and that table's)."""
    import struct

    names = b"\0.shstrtab\0"
    shoff = 64 + len(names)
    header = struct.pack("<4sBBBBB7xHHIQQQIHHHHHH", b"\x7fELF", 2, 1, 1, 0, 0, 3, 62, 1, 0,
                         0, shoff, 0, 64, 0, 0, 64, 2, 1)
    null = bytes(64)
    table = struct.pack("<IIQQQQIIQQ", 1, 3, 0, 0, 64, len(names), 0, 0, 1, 0)
    return header + names + null + table


def test_a_package_the_build_recorded_as_host_code_only_is_a_warning(tmp_path: Path) -> None:
    # torch-batch-svd's shape: its one CUDAExtension is C++ that calls cuSOLVER, in a tree
    # with no .cu file; the build marks the module host code only. Before, verify failed the
    # package ("no binary holds GPU code") on the H200, 2026-11-29.
    from flashbuild.installing.manifest import Artifact, HostCompiler, Manifest, Toolkit

    pkg = tmp_path / "svd"
    pkg.mkdir()
    (pkg / "_c.so").write_bytes(_host_only_elf())
    manifest = Manifest(
        flashbuild="0.1.0", recipe="svd", platform="linux", archs=("sm_90a",),
        toolkit=Toolkit(root="/cuda", version="13.0"),
        host_compiler=HostCompiler(kind="gcc", version="12", path="/usr/bin/g++"),
        artifacts=(Artifact(path="_c.so", kind="module", gpu_code=False),))
    manifest.write(pkg)
    images = [(c.subject, c.status, c.summary) for c in run(pkg).checks if c.area == "images"]
    assert ("svd", Status.WARN, "no binary holds GPU code, as the build recorded: the tree "
            "compiles no device code") in images
    assert not [i for i in images if i[1] is Status.FAIL]
    # Without the build's record, the same module fails as before.
    Manifest(**{**manifest.__dict__, "artifacts": (Artifact(path="_c.so", kind="module"),)}
             ).write(pkg)
    assert any(c.status is Status.FAIL for c in run(pkg).checks if c.area == "images")


def test_a_package_beside_its_top_level_modules_reads_the_manifest_in_dist_info(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # torch-memory-saver's shape: a pure-Python package and, beside it, top-level modules
    # that hold host code only; flashbuild writes the manifest into the .dist-info folder.
    # Before, `verify --package` read the package's folder, found no manifest there and
    # failed it ("no binary holds GPU code") although the build had recorded why.
    from flashbuild.installing.manifest import Artifact, HostCompiler, Manifest, Toolkit

    site = make_installed(tmp_path)
    (site / f"fakekern_cuda{EXT}").write_bytes(_host_only_elf())
    (site / "fakekern" / "__init__.py").write_text("")
    info = site / "fake_kern-0.1.dist-info"
    Manifest(flashbuild="0.1.0", recipe="fk", platform="linux", archs=("sm_90a",),
             toolkit=Toolkit(root="/cuda", version="13.0"),
             host_compiler=HostCompiler(kind="gcc", version="12", path="/usr/bin/g++"),
             artifacts=(Artifact(path=f"../fakekern_cuda{EXT}", kind="module",
                                 gpu_code=False),)).write(info)
    with (info / "RECORD").open("a") as fh:
        fh.write("fake_kern-0.1.dist-info/flashbuild-manifest.json,,\n")
    monkeypatch.syspath_prepend(str(site))
    report = run(package="fakekern", arch="sm_90a")
    images = [(c.status, c.summary) for c in report.checks if c.area == "images"]
    assert (Status.WARN, "no binary holds GPU code, as the build recorded: the tree "
            "compiles no device code") in images
    assert report.manifest_path == info / "flashbuild-manifest.json"
    assert not [i for i in images if i[0] is Status.FAIL]
