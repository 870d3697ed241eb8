"""A library a PyPI CUDA wheel holds, loaded by the loader shim before the package's own
binaries (Linux).

The class: a package that loads its shared libraries itself (ctypes), built against the PyPI
toolkit, links `libcublas.so.13`, which lives in `site-packages/nvidia/cu13/lib`; its
RUNPATH is `$ORIGIN` and no system folder has it, so the load fails with "cannot open shared
object file" unless something loads it first (torch does for its extensions; a package that
does not import torch has nothing). Here with real ELF files from the host compiler: a
`libfbdep.so.1` in a fake wheel folder and a `libplug.so` that needs it."""

from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from flashbuild.building.artifacts import BuiltArtifact
from flashbuild.installing import shim
from flashbuild.pipeline.driver import _unresolved
from flashbuild.platforms import linux
from flashbuild.proc import ProcessRunner
from flashbuild.verifying import binaries, runtime

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(sys.platform != "linux", reason="the Linux loader"),
              pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")]

INIT = ("import ctypes, pathlib\n"
        "_lib = ctypes.CDLL(str(pathlib.Path(__file__).parent / 'lib' / 'libplug.so'))\n"
        "ANSWER = _lib.plug()\n")


def _gcc(*args: str | Path) -> None:
    subprocess.run(["gcc", "-shared", "-fPIC", *map(str, args)], check=True, timeout=120,
                   capture_output=True)


def _tree(tmp_path: Path, site: str) -> tuple[Path, Path, Path]:
    """(the wheel library, the package folder, the folder to put on sys.path)."""
    wheel_lib = tmp_path / site / "site-packages" / "nvidia" / "cu13" / "lib"
    wheel_lib.mkdir(parents=True)
    (tmp_path / "dep.c").write_text("int fbdep_answer(void) { return 42; }\n")
    _gcc("-Wl,-soname,libfbdep.so.1", "-o", wheel_lib / "libfbdep.so.1", tmp_path / "dep.c")
    pkg = tmp_path / "pkgroot" / "plugpkg"
    (pkg / "lib").mkdir(parents=True)
    (tmp_path / "plug.c").write_text("int fbdep_answer(void);\n"
                                     "int plug(void) { return fbdep_answer() + 1; }\n")
    _gcc("-Wl,-rpath,$ORIGIN", "-o", pkg / "lib" / "libplug.so", tmp_path / "plug.c",
         f"-L{wheel_lib}", "-l:libfbdep.so.1")
    (pkg / "__init__.py").write_text(INIT)
    return wheel_lib / "libfbdep.so.1", pkg, tmp_path / site / "site-packages"


def _import(tmp_path: Path, site_packages: Path) -> subprocess.CompletedProcess[str]:
    # -S: no user or system site folders; the fake site-packages and the package root only.
    return subprocess.run([sys.executable, "-S", "-c", "import plugpkg; print(plugpkg.ANSWER)"],
                          env={"PYTHONPATH": f"{tmp_path / 'pkgroot'}:{site_packages}",
                               "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60, check=False)


def _with_shim(pkg: Path, preload: list[str]) -> None:
    (pkg / f"{shim.SHIM_MODULE}.py").write_text(
        shim.render([], package="plugpkg", preload=preload), encoding="utf-8")
    (pkg / "__init__.py").write_text(shim.insert(INIT), encoding="utf-8")


def test_without_the_shim_the_wheel_library_is_not_found(tmp_path: Path) -> None:
    _, _, site = _tree(tmp_path, "venv")
    done = _import(tmp_path, site)
    assert done.returncode != 0 and "libfbdep.so.1" in done.stderr, done.stderr


def test_the_shim_loads_it_first_and_the_package_loads(tmp_path: Path) -> None:
    dep, pkg, site = _tree(tmp_path, "venv")
    _with_shim(pkg, [str(dep)])
    done = _import(tmp_path, site)
    assert done.returncode == 0 and done.stdout.strip() == "43", done.stderr


def test_a_moved_environment_is_looked_up_below_site_packages(tmp_path: Path) -> None:
    """Recorded in one venv, imported from another: the same path below site-packages."""
    dep, pkg, _ = _tree(tmp_path, "venv")
    moved = tmp_path / "other" / "site-packages" / "nvidia" / "cu13" / "lib"
    shutil.copytree(dep.parent, moved)
    recorded = str(dep)
    shutil.rmtree(tmp_path / "venv")
    _with_shim(pkg, [recorded])
    done = _import(tmp_path, tmp_path / "other" / "site-packages")
    assert done.returncode == 0 and done.stdout.strip() == "43", done.stderr


def test_install_finds_what_to_preload_and_verify_resolves_it_so(tmp_path: Path) -> None:
    """What the build records (the binaries' unresolved names, found in a wheel's folder)
    and how verify reads the same binary once the shim loads it."""
    dep, pkg, site = _tree(tmp_path, "venv")
    info = binaries.read_link_info(pkg / "lib" / "libplug.so")
    missing = binaries.unresolved([info], cache={})
    assert missing == ["libfbdep.so.1"]
    assert shim.wheel_libraries(missing, [site]) == [dep]
    # Found by the system loader: nothing to preload.
    assert binaries.unresolved([info], cache={"libfbdep.so.1": "/usr/lib/x"}) == []
    # A link stub (`stubs/`) is never loaded; the driver's library is never searched for.
    stub = site / "nvidia" / "cu13" / "lib" / "stubs"
    stub.mkdir()
    (stub / "libcuda.so.1").write_bytes(b"\x7fELF")
    assert shim.wheel_libraries(["libcuda.so.1"], [site]) == []
    deps = binaries.resolve_linux(info, env={}, cache={})
    resolved = binaries.with_shim_preload(deps, [dep])
    (hit,) = [d for d in resolved if d.name == "libfbdep.so.1"]
    assert hit.resolution is binaries.Resolution.FOUND and hit.path == str(dep)
    assert "loader shim" in hit.via
    assert linux.LinuxPlatform.preloads_wheel_libraries


def _manifest(pkg: Path, plugins: list[str]) -> None:
    """A manifest as flashbuild writes it for a package whose binaries are `plugins`."""
    manifest = {"schema_version": 1, "flashbuild": "0.1.0", "recipe": pkg.name,
                "platform": "linux", "archs": ["sm_90a"],
                "toolkit": {"root": "/usr/local/cuda", "version": "13.0"},
                "host_compiler": {"kind": "gcc", "version": "12", "path": "/usr/bin/g++"},
                "artifacts": [{"path": path, "kind": "plugin"} for path in plugins]}
    (pkg / "flashbuild-manifest.json").write_text(json.dumps(manifest))


def _beside(tmp_path: Path, init: str) -> Path:
    """site-packages/{pkgx/, lib/libout.so}: the wheel installs a copy of a library outside
    its package (a CMake install rule's `lib/`), one whose dependency resolves nowhere."""
    other = tmp_path / "elsewhere"
    other.mkdir()
    (tmp_path / "dep.c").write_text("int nowhere(void) { return 1; }\n")
    _gcc("-Wl,-soname,libnowhere.so.1", "-o", other / "libnowhere.so.1", tmp_path / "dep.c")
    site = tmp_path / "site-packages"
    (site / "lib").mkdir(parents=True)
    (tmp_path / "out.c").write_text("int nowhere(void);\nint out(void) { return nowhere(); }\n")
    _gcc("-o", site / "lib" / "libout.so", tmp_path / "out.c", f"-L{other}", "-l:libnowhere.so.1")
    pkg = site / "pkgx"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(init)
    _manifest(pkg, ["../lib/libout.so"])
    return pkg


def _verify_checks(pkg: Path, area: str) -> list[dict[str, str]]:
    """`flashbuild verify --no-gpu --json` of the package's manifest: its checks of `area`."""
    done = subprocess.run([sys.executable, "-m", "flashbuild", "verify",
                           str(pkg / "flashbuild-manifest.json"), "--no-gpu", "--json"],
                          capture_output=True, text=True, timeout=300, check=False)
    return [c for c in json.loads(done.stdout)["checks"] if c["area"] == area]


def _dependency_statuses(pkg: Path) -> list[str]:
    return [c["status"] + ": " + c["summary"] for c in _verify_checks(pkg, "dependencies")]


def test_a_copy_beside_the_package_that_would_not_load_is_a_warning_once_it_imports(
        tmp_path: Path) -> None:
    """llama-cpp-python's class: its wheel installs every library into its package and again
    into `site-packages/lib`, where nothing loads the copies (they have no RUNPATH). The
    package imports: those copies are warnings, not a failed build."""
    (status,) = _dependency_statuses(_beside(tmp_path, ""))
    assert status.startswith("warn: needs libnowhere.so.1: not found (a copy outside the "
                             "package"), status


def test_before_a_clean_import_the_failure_stands(tmp_path: Path) -> None:
    (status,) = _dependency_statuses(_beside(tmp_path, "raise ImportError('broken')\n"))
    assert status == "fail: needs libnowhere.so.1: not found", status


def _driver_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_driver_present(), reason="this machine has the NVIDIA driver")
def test_a_package_that_links_the_driver_is_not_failed_for_its_absence(tmp_path: Path) -> None:
    """llama-cpp-python links CUDA::cuda_driver: its libraries need `libcuda.so.1`, so its
    import cannot succeed where the driver is not installed (a build machine, a CI runner),
    however right the build. verify says so as a warning, not a failed import."""
    stub_dir = tmp_path / "stub"
    stub_dir.mkdir()
    (tmp_path / "cuda.c").write_text("int cuInit(unsigned int flags) { return 0; }\n")
    _gcc("-Wl,-soname,libcuda.so.1", "-o", stub_dir / "libcuda.so.1", tmp_path / "cuda.c")
    site = tmp_path / "site-packages"
    pkg = site / "drvpkg"
    (pkg / "lib").mkdir(parents=True)
    (tmp_path / "k.c").write_text("int cuInit(unsigned int);\nint k(void) { return cuInit(0); }\n")
    _gcc("-Wl,-rpath,$ORIGIN", "-o", pkg / "lib" / "libk.so", tmp_path / "k.c", f"-L{stub_dir}",
         "-l:libcuda.so.1")
    shutil.rmtree(stub_dir)
    (pkg / "__init__.py").write_text(INIT.replace("libplug.so", "libk.so").replace(
        "ANSWER = _lib.plug()\n", ""))
    _manifest(pkg, ["lib/libk.so"])
    (check,) = _verify_checks(pkg, "import")
    assert check["status"] == "warn", check
    assert check["summary"] == ("not imported here: it loads libcuda.so.1, the NVIDIA "
                                "driver's library, which this machine does not have")


@pytest.mark.skipif(_driver_present(), reason="this machine has the NVIDIA driver")
def test_a_package_that_asks_torch_for_the_gpu_as_it_imports_is_not_failed_here(
        tmp_path: Path) -> None:
    """torchsparse's backends.py calls `torch.cuda.get_device_capability()` when imported,
    and torch raises "Found no NVIDIA driver on your system" where there is none: a correct
    build that no import can prove here. (The package raises torch's words itself, so that
    no CUDA torch is needed.) verify warns and names the package's line; before, the import
    failed it."""
    site = tmp_path / "site-packages"
    pkg = site / "gpupkg"
    (pkg / "lib").mkdir(parents=True)
    (tmp_path / "k.c").write_text("int k(void) { return 1; }\n")
    _gcc("-o", pkg / "lib" / "libk.so", tmp_path / "k.c")
    (pkg / "__init__.py").write_text("from . import backends\n")
    (pkg / "backends.py").write_text(
        "def init():\n    raise RuntimeError('Found no NVIDIA driver on your system. Please "
        "check that you have an NVIDIA GPU and installed a driver')\n\n\ninit()\n")
    _manifest(pkg, ["lib/libk.so"])
    (check,) = _verify_checks(pkg, "import")
    assert check["status"] == "warn", check
    assert check["summary"] == ("not imported here: importing it asks torch for a GPU "
                                "(gpupkg/backends.py:2), and this machine has none")


def test_a_copy_whose_libraries_lie_beside_it_is_a_c_sdk_not_a_failure(
        tmp_path: Path) -> None:
    """The same copies, judged without an import (the driver is missing, the import failed):
    a library in `site-packages/lib` that needs another library lying in that same folder
    is how a CMake install rule leaves a C/C++ SDK (with its `cmake/` and `pkgconfig/`
    files); its consumers put the folder on their loader path. A library found nowhere
    stays a failure."""
    pkg = _beside(tmp_path, "raise ImportError('broken')\n")
    site = pkg.parent
    (tmp_path / "sib.c").write_text("int sib(void) { return 2; }\n")
    _gcc("-Wl,-soname,libsib.so.0", "-o", site / "lib" / "libsib.so.0", tmp_path / "sib.c")
    (tmp_path / "user.c").write_text("int sib(void);\nint user(void) { return sib(); }\n")
    _gcc("-o", site / "lib" / "libuser.so", tmp_path / "user.c", f"-L{site / 'lib'}",
         "-l:libsib.so.0")
    _manifest(pkg, ["../lib/libout.so", "../lib/libuser.so", "../lib/libsib.so.0"])
    statuses = _dependency_statuses(pkg)
    assert "fail: needs libnowhere.so.1: not found" in statuses, statuses
    (beside,) = [s for s in statuses if "libsib.so.0" in s]
    assert beside.startswith("warn: needs libsib.so.0, which lies beside it"), beside


def test_the_build_keeps_the_names_and_looks_the_files_up_each_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the build records for the shim (pipeline/driver.py): the unresolved names are
    read from the binaries once per change of them; where they lie is looked up on every
    build, so a wheel installed after the first build counts. A torch extension is left
    out (`import torch` loads its CUDA libraries)."""
    from flashbuild.building.artifacts import BuiltArtifact
    from flashbuild.pipeline import driver
    from flashbuild.proc import ProcessRunner

    dep, pkg, site_packages = _tree(tmp_path, "venv")
    (tmp_path / "ext.c").write_text("int c10_thing(void);\nint ext(void) { return c10_thing(); }\n")
    torch_lib = tmp_path / "torchlib"
    torch_lib.mkdir()
    (tmp_path / "c10.c").write_text("int c10_thing(void) { return 0; }\n")
    _gcc("-Wl,-soname,libc10.so", "-o", torch_lib / "libc10.so", tmp_path / "c10.c")
    _gcc("-o", pkg / "ext.so", tmp_path / "ext.c", f"-L{torch_lib}", "-lc10", f"-L{dep.parent}",
         "-l:libfbdep.so.1")
    artifacts = [BuiltArtifact(pkg / "lib" / "libplug.so", "plugin", "plug"),
                 BuiltArtifact(pkg / "ext.so", "module", "ext")]
    monkeypatch.setattr(driver.site, "getsitepackages", lambda: [str(site_packages)])
    record = tmp_path / "preload.json"
    runner = ProcessRunner()
    # The first build: the wheel is not installed yet (the library is elsewhere).
    moved = dep.with_name("elsewhere")
    dep.rename(moved)
    # The torch extension's libc10.so is in no loader path: the shim imports torch first.
    assert driver._wheel_preloads(artifacts, runner, {}, record) == ((), True)
    assert json.loads(record.read_text())["unresolved"] == ["libfbdep.so.1"]
    # Installed since: the next (no-op) build records it.
    moved.rename(dep)
    assert driver._wheel_preloads(artifacts, runner, {}, record) == ((str(dep),), True)


# ---- a torch extension imported by its module's name ---------------------------------------

TORCH_INIT = ("import ctypes, pathlib\n"
              "_c10 = ctypes.CDLL(str(pathlib.Path(__file__).parent / 'lib' / 'libc10.so'),"
              " mode=ctypes.RTLD_GLOBAL)\n")


def _torch_extension(tmp_path: Path) -> tuple[Path, Path]:
    """(the package folder, site-packages) for a package whose one module links a stand-in
    `libc10.so` that only `import torch` loads (torch's own lib folder is on no loader path
    of the module), and whose `__init__.py` is empty (simple-knn's `simple_knn._C`)."""
    site = tmp_path / "venv" / "site-packages"
    torch_lib = site / "torch" / "lib"
    torch_lib.mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(TORCH_INIT)
    (tmp_path / "c10.c").write_text("int c10_answer(void) { return 41; }\n")
    _gcc("-Wl,-soname,libc10.so", "-o", torch_lib / "libc10.so", tmp_path / "c10.c")
    pkg = tmp_path / "pkgroot" / "knnpkg"
    pkg.mkdir(parents=True)
    (tmp_path / "mod.c").write_text(
        "#include <Python.h>\nint c10_answer(void);\n"
        "static struct PyModuleDef m = {PyModuleDef_HEAD_INIT, \"_C\", 0, -1, 0};\n"
        "PyMODINIT_FUNC PyInit__C(void) { PyObject* o = PyModule_Create(&m);\n"
        "  PyModule_AddIntConstant(o, \"ANSWER\", c10_answer() + 1); return o; }\n")
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    _gcc(f"-I{sysconfig.get_paths()['include']}", "-o", pkg / f"_C{suffix}", tmp_path / "mod.c",
         f"-L{torch_lib}", "-lc10")
    (pkg / "__init__.py").write_text("")
    return pkg, site


def _import_module(tmp_path: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-S", "-c",
                           "from knnpkg._C import ANSWER; print(ANSWER)"],
                          env={"PYTHONPATH": f"{tmp_path / 'pkgroot'}:{site}",
                               "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60, check=False)


def test_a_torch_extension_imported_by_name_needs_torch_first(tmp_path: Path) -> None:
    pkg, site = _torch_extension(tmp_path)
    # As pip installs it: the module cannot load on its own (simple-knn seen here, verify
    # then failed its exports for it).
    done = _import_module(tmp_path, site)
    assert done.returncode != 0 and "libc10.so" in done.stderr, done.stderr
    # verify's export check says why the export is not there: the module does not load.
    probe = runtime.import_check("knnpkg", ["_C.ANSWER"], runner=ProcessRunner(),
                                 env={"PYTHONPATH": f"{tmp_path / 'pkgroot'}:{site}",
                                      "PATH": "/usr/bin:/bin"})
    assert probe.imported and probe.missing_exports == ("_C.ANSWER",)
    assert "libc10.so" in probe.why["_C.ANSWER"], probe
    # The build reads that the module needs torch's library and finds it nowhere.
    module = next(pkg.glob("_C*.so"))
    names, torch = _unresolved([BuiltArtifact(path=module, kind="module", name="knnpkg._C")],
                               ProcessRunner(), {"PATH": "/usr/bin:/bin"})
    assert (names, torch) == ([], True)
    # The shim rendered with it imports torch first: the module loads by its name.
    (pkg / f"{shim.SHIM_MODULE}.py").write_text(
        shim.render([], package="knnpkg", import_torch=True), encoding="utf-8")
    (pkg / "__init__.py").write_text(shim.insert(""), encoding="utf-8")
    done = _import_module(tmp_path, site)
    assert done.returncode == 0 and done.stdout.strip() == "42", done.stderr
    probe = runtime.import_check("knnpkg", ["_C.ANSWER"], runner=ProcessRunner(),
                                 env={"PYTHONPATH": f"{tmp_path / 'pkgroot'}:{site}",
                                      "PATH": "/usr/bin:/bin"})
    assert probe.missing_exports == (), probe
    # Without torch installed the package still imports; the module's own load says why not.
    shutil.rmtree(site / "torch")
    done = subprocess.run([sys.executable, "-S", "-c", "import knnpkg"],
                          env={"PYTHONPATH": f"{tmp_path / 'pkgroot'}:{site}"},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
