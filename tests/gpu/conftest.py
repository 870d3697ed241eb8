"""GPU test session: build csrc/ for this GPU's own arch (or use an installed flashkern when
FLASHKERN_PREBUILT=1) and import it. Only GPU-marked tests use these fixtures; the root
conftest skips them on machines without a GPU, so nothing here runs there."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
DEVBUILD = ROOT / "csrc" / "python" / "flashkern" / "_devbuild.py"


def load_devbuild() -> ModuleType:
    """The shared build helper, loaded by path (flashkern is not importable before the build)."""
    spec = importlib.util.spec_from_file_location("flashkern_devbuild", DEVBUILD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def torch() -> ModuleType:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch


@pytest.fixture(scope="session")
def fk(torch: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """The flashkern package, built for this GPU (or the installed one)."""
    if os.environ.get("FLASHKERN_PREBUILT") != "1":
        devbuild = load_devbuild()
        major, minor = torch.cuda.get_device_capability()
        archs = devbuild.arch_for_capability(major, minor)
        result = devbuild.build(tmp_path_factory.mktemp("flashkern"), archs)
        sys.path.insert(0, str(result.python_dir))
        for name in [n for n in sys.modules if n == "flashkern" or n.startswith("flashkern.")]:
            del sys.modules[name]
    import flashkern

    return flashkern
