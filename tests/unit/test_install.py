"""Install: wheel tags and contents (with RECORD), inplace copies, read-only targets, and the
stamp that makes an unchanged re-run install nothing."""

from __future__ import annotations

import os
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from flashbuild import platforms
from flashbuild.building import artifacts
from flashbuild.errors import InstallError, UsageError
from flashbuild.installing import install as inst
from flashbuild.installing import shim
from flashbuild.installing.wheel import WheelTag, build_wheel, current_tag, wheel_name
from flashbuild.platforms.linux import LinuxPlatform
from flashbuild.proc import Completed
from tests.fakes import ReplayRunner

EXT = sysconfig.get_config_var("EXT_SUFFIX")


def _tree(tmp_path: Path) -> tuple[Path, tuple[artifacts.BuiltArtifact, ...]]:
    pkg = tmp_path / "src" / "python" / "flashkern"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""flashkern."""\n\nfrom flashkern._C import built_archs\n')
    (pkg / "ops.py").write_text("X = 1\n")
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "ops.cpython-311.pyc").write_bytes(b"\0")
    (pkg / f"_C{EXT}").write_bytes(b"stale binary from an earlier inplace install")
    out = tmp_path / "build" / "out"
    out.mkdir(parents=True)
    module = out / f"_C{EXT}"
    module.write_bytes(b"\x7fELF fresh module")
    plugin = out / "libflashkern_attn.so"
    plugin.write_bytes(b"\x7fELF plugin")
    return pkg, (artifacts.BuiltArtifact(module, "module", "_C"),
                 artifacts.BuiltArtifact(plugin, "plugin", "flashkern_attn"))


def _plan(tmp_path: Path, mode: artifacts.InstallMode, **over: object) -> inst.InstallPlan:
    pkg, arts = _tree(tmp_path)
    base: dict[str, object] = dict(
        mode=mode, package="flashkern", package_dir=pkg, artifacts=arts,
        dll_dirs=("C:\\CUDA\\v13.0\\bin\\x64",), manifest_name="flashbuild-manifest.json",
        manifest=b'{"recipe": "csrc"}\n', python=sys.executable, version="1+sm90a.cu130",
        work_dir=tmp_path / "build")
    base.update(over)
    return inst.InstallPlan(**base)  # type: ignore[arg-type]


def test_current_tag_is_this_interpreter() -> None:
    tag = current_tag()
    ver = f"{sys.version_info.major}{sys.version_info.minor}"
    assert tag.interpreter == f"cp{ver}" and tag.abi.startswith(f"cp{ver}")
    assert tag.platform == sysconfig.get_platform().replace("-", "_").replace(".", "_")
    assert "manylinux" not in str(tag)
    assert wheel_name("flashkern", "1+sm90a", WheelTag("cp311", "cp311", "linux_x86_64")) == \
        "flashkern-1+sm90a-cp311-cp311-linux_x86_64.whl"
    assert wheel_name("flash-kern", "1", WheelTag("cp312", "cp312", "win_amd64")) == \
        "flash_kern-1-cp312-cp312-win_amd64.whl"


def test_wheel_contents_and_record(tmp_path: Path) -> None:
    pkg, arts = _tree(tmp_path)
    wheel = build_wheel(
        distribution="flashkern", version="1+sm90a", package="flashkern", package_dir=pkg,
        extra={a.path.name: a.path for a in arts} | {"__init__.py": b"patched\n"},
        out_dir=tmp_path / "dist", tag=WheelTag("cp311", "cp311", "linux_x86_64"))
    assert wheel.name == "flashkern-1+sm90a-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        assert f"flashkern/_C{EXT}" in names and "flashkern/libflashkern_attn.so" in names
        assert "flashkern/ops.py" in names
        assert not any("__pycache__" in n for n in names)
        assert zf.read(f"flashkern/_C{EXT}") == b"\x7fELF fresh module"  # not the stale one
        assert zf.read("flashkern/__init__.py") == b"patched\n"
        wheel_meta = zf.read("flashkern-1+sm90a.dist-info/WHEEL").decode()
        assert "Tag: cp311-cp311-linux_x86_64" in wheel_meta
        assert "Root-Is-Purelib: false" in wheel_meta
        assert "Name: flashkern" in zf.read("flashkern-1+sm90a.dist-info/METADATA").decode()
        record = zf.read("flashkern-1+sm90a.dist-info/RECORD").decode()
        assert f"flashkern/_C{EXT},sha256=" in record
    assert not list((tmp_path / "dist").glob(".wheel-*"))


def test_inplace_install_and_noop(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "inplace")
    result = inst.install(plan, ReplayRunner(), {})
    pkg = plan.package_dir
    assert (pkg / f"_C{EXT}").read_bytes() == b"\x7fELF fresh module"
    assert (pkg / "libflashkern_attn.so").read_bytes() == b"\x7fELF plugin"
    assert shim.has_block((pkg / "__init__.py").read_text())
    assert "C:\\\\CUDA\\\\v13.0\\\\bin\\\\x64" in (pkg / "_flashbuild_shim.py").read_text()
    assert (pkg / "flashbuild-manifest.json").read_bytes() == plan.manifest
    assert result.location == pkg and not result.skipped
    again = inst.install(plan, ReplayRunner(), {})
    assert again.skipped
    (pkg / "libflashkern_attn.so").unlink()  # the install was damaged: install again
    assert not inst.install(plan, ReplayRunner(), {}).skipped


def test_another_builds_install_is_replaced_when_switching_back(tmp_path: Path) -> None:
    # Two build folders (one per arch) install into the same package folder: switching back
    # to the first must put its binary back, although its own stamp still matches.
    first = _plan(tmp_path, "inplace", manifest=b'{"archs": "120-real"}\n')
    pkg = first.package_dir
    other_out = tmp_path / "build100" / "out"
    other_out.mkdir(parents=True)
    other_module = other_out / f"_C{EXT}"
    other_module.write_bytes(b"\x7fELF sm_100 module!")
    second = inst.InstallPlan(
        mode="inplace", package="flashkern", package_dir=pkg,
        artifacts=(artifacts.BuiltArtifact(other_module, "module", "_C"), first.artifacts[1]),
        dll_dirs=first.dll_dirs, manifest_name=first.manifest_name,
        manifest=b'{"archs": "100-real"}\n', python=sys.executable, version="1+sm100.cu130",
        work_dir=tmp_path / "build100")
    assert not inst.install(first, ReplayRunner(), {}).skipped
    assert not inst.install(second, ReplayRunner(), {}).skipped
    assert (pkg / f"_C{EXT}").read_bytes() == b"\x7fELF sm_100 module!"
    back = inst.install(first, ReplayRunner(), {})
    assert not back.skipped
    assert (pkg / f"_C{EXT}").read_bytes() == b"\x7fELF fresh module"
    assert (pkg / "flashbuild-manifest.json").read_bytes() == first.manifest
    assert any("held another build" in n for n in back.notes)
    assert inst.install(first, ReplayRunner(), {}).skipped  # and now it is a no-op again


def test_a_touched_but_identical_file_is_still_a_noop(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "inplace")
    inst.install(plan, ReplayRunner(), {})
    module = plan.package_dir / f"_C{EXT}"
    st = module.stat()
    import os
    os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    assert inst.install(plan, ReplayRunner(), {}).skipped  # same bytes: hashed, unchanged


def test_read_only_target_replaces_nothing(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "inplace")
    pkg = plan.package_dir
    before = {p.name: p.read_bytes() for p in pkg.iterdir() if p.is_file()}
    pkg.chmod(0o555)
    try:
        if platforms.current().name == "windows":
            # chmod sets the folder's read-only *attribute*, which Windows ignores for
            # creating files (Explorer sets it on customised folders); flashbuild follows
            # Windows (platforms/windows.py `writable`), so the install goes ahead.
            result = inst.install(plan, ReplayRunner(), {})
            assert not result.skipped
            assert (pkg / f"_C{EXT}").read_bytes() == b"\x7fELF fresh module"
            return
        with pytest.raises(InstallError) as info:
            inst.install(plan, ReplayRunner(), {})
    finally:
        pkg.chmod(0o755)
    assert "not writable" in info.value.evidence and "nothing was replaced" in info.value.what
    assert {p.name: p.read_bytes() for p in pkg.iterdir() if p.is_file()} == before


def test_read_only_file_replaces_nothing(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "inplace")
    target = plan.package_dir / f"_C{EXT}"
    target.chmod(0o444)
    with pytest.raises(InstallError):
        inst.install(plan, ReplayRunner(), {})
    assert target.read_bytes().startswith(b"stale")
    assert not (plan.package_dir / "libflashkern_attn.so").exists()


def test_wheel_install_goes_through_pip(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    runner = ReplayRunner()
    pip_calls: list[tuple[str, ...]] = []

    def respond(argv: tuple[str, ...]) -> Completed:
        if argv[1] == "-c":
            return Completed(argv, 0, f"{site}\n", "")
        pip_calls.append(argv)
        return Completed(argv, 0, "", "")

    runner.responses[(Path(sys.executable).name,)] = respond
    plan = _plan(tmp_path, "wheel")
    result = inst.install(plan, runner, {})
    assert result.wheel is not None and result.wheel.is_file()
    assert pip_calls[0][1:7] == ("-m", "pip", "install", "--force-reinstall", "--no-deps",
                                 "--no-input")
    assert pip_calls[0][-1] == str(result.wheel)
    assert result.location == site / "flashkern"
    with zipfile.ZipFile(result.wheel) as zf:
        init = zf.read("flashkern/__init__.py").decode()
        assert shim.has_block(init)
        assert "flashkern/_flashbuild_shim.py" in zf.namelist()
        assert zf.read("flashkern/flashbuild-manifest.json") == plan.manifest
    # the source tree's __init__.py is not edited by a wheel install
    assert not shim.has_block((plan.package_dir / "__init__.py").read_text())


def test_pip_failure_is_an_install_error(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    runner = ReplayRunner()
    runner.responses[(Path(sys.executable).name,)] = lambda argv: (
        Completed(argv, 0, f"{site}\n", "") if argv[1] == "-c" else
        Completed(argv, 1, "", "ERROR: flashkern.whl is not a supported wheel on this platform."))
    with pytest.raises(InstallError) as info:
        inst.install(_plan(tmp_path, "wheel"), runner, {})
    assert "not a supported wheel" in info.value.evidence


def test_none_and_bad_mode(tmp_path: Path) -> None:
    assert inst.install(_plan(tmp_path, "none"), ReplayRunner(), {}).location is None
    with pytest.raises(UsageError):
        artifacts.parse_install_mode("copy")


def _snapshot(pkg: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in pkg.iterdir() if p.is_file()}


def test_a_swap_that_fails_midway_puts_every_old_file_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 20: the module was swapped, then the plugin failed (WinError 5: a loaded binary),
    # leaving new _C next to the old plugin although the error said nothing was replaced.
    plan = _plan(tmp_path, "inplace")
    pkg = plan.package_dir
    (pkg / "libflashkern_attn.so").write_bytes(b"old plugin")
    before = _snapshot(pkg)
    real = os.replace

    def refuse_plugin(src: str | Path, dst: str | Path) -> None:
        if Path(dst).name == "libflashkern_attn.so" and str(src).endswith("-tmp"):
            raise PermissionError(13, "Access is denied")
        real(src, dst)

    monkeypatch.setattr(os, "replace", refuse_plugin)
    monkeypatch.setattr(platforms, "current", LinuxPlatform)  # no retry: fail at once
    with pytest.raises(InstallError) as info:
        inst.install(plan, ReplayRunner(), {})
    assert "nothing was replaced" in info.value.what
    assert "libflashkern_attn.so" in info.value.evidence
    assert _snapshot(pkg) == before  # no .flashbuild-tmp / -old left, old bytes everywhere


def test_a_held_binary_is_found_before_anything_moves(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = _plan(tmp_path, "inplace")
    pkg = plan.package_dir
    held = pkg / f"_C{EXT}"
    before = _snapshot(pkg)
    real_open = Path.open
    moved: list[str] = []
    real_replace = os.replace

    def open_(self: Path, mode: str = "r", *args: object, **kwargs: object) -> object:
        if self == held and "+" in mode:  # what Windows says for a loaded .pyd
            raise PermissionError(13, "The process cannot access the file because it is "
                                      "being used by another process")
        return real_open(self, mode, *args, **kwargs)  # type: ignore[call-overload]

    def replace(src: str | Path, dst: str | Path) -> None:
        moved.append(Path(dst).name)
        real_replace(src, dst)

    monkeypatch.setattr(Path, "open", open_)
    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(InstallError) as info:
        inst.install(plan, ReplayRunner(), {})
    assert f"_C{EXT} could not be replaced; nothing was replaced" == info.value.what
    assert moved == [] and _snapshot(pkg) == before


def _pip_leaving(tmp_path: Path, site: Path, left: list[str]) -> ReplayRunner:
    """A pip that installs but leaves `left` in site-packages, as pip on Windows does when
    the old package's .pyd is loaded (it moves `flashkern` to `~lashkern` and cannot delete
    it)."""
    runner = ReplayRunner()

    def respond(argv: tuple[str, ...]) -> Completed:
        if argv[1] == "-c":
            return Completed(argv, 0, f"{site}\n", "")
        if argv[1:4] == ("-m", "pip", "check"):
            return Completed(argv, 0, "No broken requirements found.\n", "")
        for name in left:
            (site / name).mkdir()
            (site / name / f"_C{EXT}").write_bytes(b"old")
        return Completed(argv, 0, "", "")

    runner.responses[(Path(sys.executable).name,)] = respond
    return runner


def test_folders_pip_left_behind_are_removed(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "~orch").mkdir()  # torch's, not ours: left alone
    names = ["~lashkern", "~-ashkern", "~lashkern-1+sm90a.cu130.dist-info"]
    assert [p.name for p in inst.pip_leftovers(_leftover_site(tmp_path, names), "flashkern",
                                               "flashkern")] == sorted(names)
    runner = _pip_leaving(tmp_path, site, ["~lashkern", "~lashkern-0.9.dist-info"])
    result = inst.install(_plan(tmp_path, "wheel"), runner, {})
    assert sorted(p.name for p in site.iterdir()) == ["~orch"]
    assert result.warnings == ()


def _leftover_site(tmp_path: Path, names: list[str]) -> Path:
    site = tmp_path / "probe"
    site.mkdir()
    for name in [*names, "~orch", "~ashkern", "lashkern", "~lashkern.txt"]:
        if name.endswith(".txt"):
            (site / name).write_text("")
        else:
            (site / name).mkdir()
    return site


def test_a_folder_pip_left_that_cannot_be_removed_is_reported(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    site.mkdir()
    runner = _pip_leaving(tmp_path, site, ["~lashkern"])
    monkeypatch.setattr(inst.shutil, "rmtree", lambda *a, **k: None)  # still loaded somewhere
    result = inst.install(_plan(tmp_path, "wheel"), runner, {})
    (warning,) = result.warnings
    assert str(site / "~lashkern") in warning and "Ignoring invalid distribution" in warning
    assert "delete the folder" in warning
    assert result.to_json()["warnings"] == [warning]
