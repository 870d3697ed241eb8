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
