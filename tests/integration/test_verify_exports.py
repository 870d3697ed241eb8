"""verify's import check resolves an export where the module really lives: a top-level
extension installed beside its package (setup.py's `CUDAExtension("foo_cuda", ...)` next to
`packages=["foo"]`, causal-conv1d's shape) is `foo_cuda`, not `foo.foo_cuda`; one that is not
beside the package (elsewhere on sys.path) does not count. Real child interpreters."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from flashbuild.proc import ProcessRunner
from flashbuild.verifying.runtime import import_check

pytestmark = pytest.mark.integration


def _site(root: Path) -> Path:
    site = root / "site"
    (site / "foo").mkdir(parents=True)
    (site / "foo" / "__init__.py").write_text("from foo_cuda import fwd as _fwd\nVALUE = 1\n")
    (site / "foo_cuda.py").write_text("def fwd():\n    return 1\n")
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "stray.py").write_text("def fwd():\n    return 2\n")
    return site


def test_a_top_level_module_beside_the_package_holds_its_exports(tmp_path: Path) -> None:
    site = _site(tmp_path)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{site}:{tmp_path / 'elsewhere'}"}
    result = import_check("foo", ["VALUE", "foo_cuda.fwd", "foo_cuda.gone", "stray.fwd",
                                 "_fwd"], runner=ProcessRunner(), python=sys.executable,
                          env=env)
    assert result.imported, result.error
    # stray.py is importable but not beside the package: not the package's export.
    assert result.missing_exports == ("foo_cuda.gone", "stray.fwd")


def test_a_top_level_module_without_a_package_holds_its_exports(tmp_path: Path) -> None:
    # rotary-emb's shape: `rotary_emb.apply_rotary` is the module's own attribute; the module
    # imported is not a package, so `rotary_emb.rotary_emb` was looked for (issue 30).
    site = tmp_path / "site"
    site.mkdir()
    (site / "topmod.py").write_text("def block_size():\n    return 256\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site)}
    for top_level in ((), ("topmod",)):
        result = import_check("topmod", ["topmod.block_size", "topmod.gone", "block_size"],
                              runner=ProcessRunner(), python=sys.executable, env=env,
                              top_level=top_level)
        assert result.imported, result.error
        assert result.missing_exports == ("topmod.gone",), top_level
        assert not result.torch_first  # a .py module: no torch to load first


def test_a_declared_top_level_module_is_looked_up_wherever_it_is(tmp_path: Path) -> None:
    # The build says `foo_cuda` is its top-level module (the manifest's `top_level`): an
    # in-place install keeps it at the top of the tree, not beside an installed package.
    site = _site(tmp_path)
    tree = tmp_path / "tree"
    tree.mkdir()
    (site / "foo_cuda.py").rename(tree / "foo_cuda.py")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{site}:{tree}"}
    undeclared = import_check("foo", ["foo_cuda.fwd"], runner=ProcessRunner(),
                              python=sys.executable, env=env)
    assert undeclared.missing_exports == ("foo_cuda.fwd",)
    declared = import_check("foo", ["foo_cuda.fwd", "foo_cuda.gone", "VALUE"],
                            runner=ProcessRunner(), python=sys.executable, env=env,
                            top_level=["foo_cuda"])
    assert declared.imported, declared.error
    assert declared.missing_exports == ("foo_cuda.gone",)


def test_a_submodule_wins_over_the_attribute_its_package_rebinds(tmp_path: Path) -> None:
    # pytorch-fast-transformers' shape (verify failed its correct build on the H200,
    # 2026-11-28): `aggregate/__init__.py` runs `from .aggregate_cpu import aggregate as
    # aggregate_cpu`, so the attribute `aggregate.aggregate_cpu` is a function and the
    # export `aggregate.aggregate_cpu.aggregate` lives in the submodule.
    site = tmp_path / "site"
    (site / "ft" / "aggregate").mkdir(parents=True)
    (site / "ft" / "__init__.py").write_text("")
    (site / "ft" / "aggregate" / "__init__.py").write_text(
        "from .aggregate_cpu import aggregate as aggregate_cpu\n")
    (site / "ft" / "aggregate" / "aggregate_cpu.py").write_text(
        "def aggregate():\n    return 1\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site)}
    result = import_check("ft", ["aggregate.aggregate_cpu.aggregate",
                                 "aggregate.aggregate_cpu.gone", "aggregate.aggregate_cpu"],
                          runner=ProcessRunner(), python=sys.executable, env=env)
    assert result.imported, result.error
    assert result.missing_exports == ("aggregate.aggregate_cpu.gone",)


def test_an_import_stopped_by_another_distribution_names_it(tmp_path: Path) -> None:
    # torch-sparse's shape (its verify on the H200, 2026-11-28): the package imports
    # torch_scatter, which its metadata does not require and the machine lacked. The check
    # still fails (the package does not import), and it names the module to install; a
    # missing module of the package itself stays the build's to answer for.
    from flashbuild.verifying.verify import Expectations, Status, _runtime_checks

    site = tmp_path / "site"
    (site / "sparsy").mkdir(parents=True)
    (site / "sparsy" / "__init__.py").write_text("import scattery_absent.ops\n")
    (site / "owny").mkdir()
    (site / "owny" / "__init__.py").write_text("from owny import _C\n")
    # A module whose distribution has another name (OpenCV's); absent from these tests' envs.
    (site / "cvy").mkdir()
    (site / "cvy" / "__init__.py").write_text("import cv2\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site)}
    fails = {}
    for pkg in ("sparsy", "owny", "cvy"):
        checks = _runtime_checks(pkg, Expectations(), run_gpu=False, bench=False,
                                 runner=ProcessRunner(), python=sys.executable, env=env,
                                 search_path=None, selfcheck=(), import_module=True,
                                 gpu_present=lambda: False, prior=())
        fails[pkg] = [c for c in checks if c.area == "import" and c.status is Status.FAIL]
    (sparsy,), (owny,), (cvy,) = fails["sparsy"], fails["owny"], fails["cvy"]
    assert f"`{sys.executable} -m pip install \"opencv-python\"`" in cvy.fix
    assert sparsy.summary == ("does not import in a fresh interpreter: it imports "
                              "`scattery_absent`, which is not installed in this Python")
    assert f"`{sys.executable} -m pip install \"scattery_absent\"`" in sparsy.fix
    assert owny.summary == "does not import in a fresh interpreter"
    assert "pip install" not in owny.fix


def test_a_missing_module_the_package_declares_names_the_declared_distribution(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # megablocks on the offline H200 (2026-11-29): it imports `stk`, which its declared
    # `stanford-stk` provides; the fix named `pip install "stk"`, a guess from the module.
    from flashbuild.verifying.verify import Expectations, Status, _runtime_checks

    site = tmp_path / "site"
    (site / "megay").mkdir(parents=True)
    (site / "megay" / "__init__.py").write_text("import stky_absent\n")
    info = site / "megay-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: megay\nVersion: 1.0\n"
                                   "Requires-Dist: stanfordy-stk-absent>=0.1\n"
                                   "Requires-Dist: pytest-absent; extra == 'testing'\n")
    (info / "top_level.txt").write_text("megay\n")
    (info / "RECORD").write_text("megay/__init__.py,,\n")
    monkeypatch.syspath_prepend(str(site))
    checks = _runtime_checks("megay", Expectations(), run_gpu=False, bench=False,
                             runner=ProcessRunner(), python=sys.executable,
                             env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site)},
                             search_path=None, selfcheck=(), import_module=True,
                             gpu_present=lambda: False, prior=())
    (failed,) = [c for c in checks if c.area == "import" and c.status is Status.FAIL]
    assert "megay declares stanfordy-stk-absent, not installed" in failed.fix, failed.fix
    assert f'`{sys.executable} -m pip install "stanfordy-stk-absent"`' in failed.fix
