"""verify names the c10::/at:: symbols a module imports that the installed torch lacks, and
the CPython symbols an abi3 module imports from outside the limited API (issue 31 item 6).
Fixtures are built here with g++; the torch is the venv's CPU torch."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from typing import TYPE_CHECKING

import pytest

from flashbuild.proc import ProcessRunner
from flashbuild.verifying.verify import Status, verify_install

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed"),
]

# One c10 symbol torch lacks and one every libc10 exports (not to be reported).
_MISSING_C10 = """
namespace c10 {
void flashbuild_test_missing();
struct UndefinedTensorImpl { static int _singleton; };
}
extern "C" int flashbuild_entry() {
  c10::flashbuild_test_missing();
  return c10::UndefinedTensorImpl::_singleton;
}
"""

_NOT_LIMITED = """
extern "C" {
const char* PyUnicode_AsUTF8(void*);
void* _PyObject_GetState(void*);
void _Py_Dealloc(void*);
void flashbuild_entry(void* o) { PyUnicode_AsUTF8(o); _PyObject_GetState(o); _Py_Dealloc(o); }
}
"""


def _shared(tmp_path: Path, name: str, source: str) -> Path:
    cpp = tmp_path / "m.cpp"
    cpp.write_text(source, encoding="utf-8")
    out = tmp_path / name
    # -shared leaves undefined symbols to the loader (no -z defs): what an extension does.
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(out), str(cpp)], check=True,
                   timeout=60)
    return out


def _abi(path: Path) -> list[tuple[Status, str, str]]:
    report = verify_install(path=path, runner=ProcessRunner(), import_module=False,
                            run_gpu=False)
    return [(c.status, c.summary, c.evidence) for c in report.checks if c.area == "abi"]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_a_c10_symbol_the_installed_torch_lacks_is_named(tmp_path: Path) -> None:
    module = _shared(tmp_path, "_C.so", _MISSING_C10)
    checks = _abi(module)
    assert len(checks) == 1
    status, summary, evidence = checks[0]
    assert status is Status.FAIL and "1 c10/at symbol" in summary
    assert "UndefinedTensorImpl" not in evidence
    # Demangled when c++filt is present, else the mangled name.
    assert ("c10::flashbuild_test_missing()" in evidence
            or "_ZN3c1023flashbuild_test_missingEv" in evidence)


def test_abi3_module_importing_non_limited_symbols_fails(tmp_path: Path) -> None:
    module = _shared(tmp_path, "_C.abi3.so", _NOT_LIMITED)
    fails = [c for c in _abi(module) if c[0] is Status.FAIL]
    assert len(fails) == 1
    _, summary, evidence = fails[0]
    assert "abi3" in summary
    assert "PyUnicode_AsUTF8" in evidence and "_PyObject_GetState" in evidence
    assert "_Py_Dealloc" not in evidence  # in the stable ABI (Py_DECREF expands to it)
