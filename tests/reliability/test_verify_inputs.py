"""Bad input to `flashbuild verify`: each case is one clear paragraph (what, evidence, fix) on
stderr with its documented exit code, never a traceback; the good relative-path case passes.

Self-contained (no shared helpers): each case runs the real CLI in a fresh interpreter, as a
user would, on inputs made in a temp folder from the committed fixture binaries.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

V = Path(__file__).resolve().parent.parent / "fixtures" / "verify"
WHEEL_META = {
    "kern-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: false\n"
                                "Tag: cp311-cp311-linux_x86_64\n",
    "kern-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: kern\nVersion: 1.0\n",
}
#: Documented in README.md "Exit codes" and flashbuild/errors.py.
USAGE, VERIFY = 2, 8


def flashbuild(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "flashbuild", "verify", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120, check=False)


def assert_clear_error(done: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    """Exit `code`, one `error:` paragraph with its evidence and a `fix:`, no traceback."""
    out = done.stdout + done.stderr
    assert done.returncode == code, out
    assert "Traceback" not in out and "internal error" not in out, out
    assert done.stderr.count("error:") == 1 and "fix:" in done.stderr, done.stderr
    text = " ".join(done.stderr.split())
    for word in words:
        assert word in text, text


def write_wheel(path: Path, members: dict[str, str | bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def test_missing_path(tmp_path: Path) -> None:
    done = flashbuild("no/such/_C.so", "--arch", "sm120", cwd=tmp_path)
    assert_clear_error(done, USAGE, f"{tmp_path}/no/such/_C.so does not exist",
                       "made absolute from", "--package NAME")


def test_text_file_named_so(tmp_path: Path) -> None:
    (tmp_path / "_C.so").write_text("this is not a library\n")
    done = flashbuild("_C.so", cwd=tmp_path)
    assert_clear_error(done, VERIFY, "_C.so is not an ELF or PE binary", "first bytes 74686973")
    assert "manifest" not in done.stderr  # issue 9: never "manifest ... is not readable JSON"


def test_truncated_elf(tmp_path: Path) -> None:
    data = (V / "libmissing_dep.so").read_bytes()
    (tmp_path / "_C.so").write_bytes(data[: len(data) // 3])
    done = flashbuild(str(tmp_path / "_C.so"), "--arch", "sm_90a", cwd=tmp_path)
    assert_clear_error(done, VERIFY, "_C.so is a damaged ELF file", "truncated file")


def test_empty_wheel(tmp_path: Path) -> None:
    (tmp_path / "kern-1.0-py3-none-any.whl").write_bytes(b"")
    done = flashbuild("kern-1.0-py3-none-any.whl", cwd=tmp_path)
    assert_clear_error(done, VERIFY, "kern-1.0-py3-none-any.whl is not a readable wheel",
                       "download it again")


def test_zip_without_dist_info_is_not_a_wheel(tmp_path: Path) -> None:
    write_wheel(tmp_path / "kern-1.0-py3-none-any.whl", {})
    done = flashbuild("kern-1.0-py3-none-any.whl", cwd=tmp_path)
    assert_clear_error(done, VERIFY, "is not a readable wheel",
                       "no <name>.dist-info/WHEEL among its 0 file(s)")


def test_wheel_without_an_extension_module(tmp_path: Path) -> None:
    write_wheel(tmp_path / "kern-1.0-py3-none-any.whl",
                {"kern/__init__.py": "x = 1\n", **WHEEL_META})
    done = flashbuild("kern-1.0-py3-none-any.whl", "--arch", "sm120", cwd=tmp_path)
    assert_clear_error(done, VERIFY, "the wheel kern-1.0-py3-none-any.whl holds no compiled "
                       "extension module", "kern/__init__.py", "built without compiling")


def test_wheel_with_a_path_that_leaves_it(tmp_path: Path) -> None:
    write_wheel(tmp_path / "evil-1.0-py3-none-any.whl",
                {"../outside.so": b"\x7fELF", **WHEEL_META})
    done = flashbuild("evil-1.0-py3-none-any.whl", cwd=tmp_path)
    assert_clear_error(done, VERIFY, "holds paths that leave the wheel", "../outside.so")
    assert not (tmp_path.parent / "outside.so").exists()


def test_folder_with_no_binaries(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    done = flashbuild("pkg", cwd=tmp_path)
    assert_clear_error(done, VERIFY, f"the folder {tmp_path}/pkg holds no compiled extension",
                       "no .so, .so.N, .pyd or .dll")


def test_unknown_package(tmp_path: Path) -> None:
    done = flashbuild("--package", "no_such_kernels_pkg", cwd=tmp_path)
    assert_clear_error(done, VERIFY, "`no_such_kernels_pkg` is not installed")


def test_json_error_document(tmp_path: Path) -> None:
    (tmp_path / "_C.pyd").write_bytes(b"MZ" + b"\0" * 10)
    done = flashbuild("_C.pyd", "--json", cwd=tmp_path)
    assert done.returncode == VERIFY and "Traceback" not in done.stderr
    doc = json.loads(done.stdout)
    assert doc["ok"] is False and doc["exit_code"] == VERIFY and doc["fix"]


@pytest.mark.parametrize("relative", [True, False])
def test_relative_path_works_like_absolute(tmp_path: Path, relative: bool) -> None:
    # Issue 12: `verify some/relative/path` failed where the absolute path passed.
    pkg = tmp_path / "site" / "kern"
    pkg.mkdir(parents=True)
    shutil.copy(V / "sass_sm90a.o", pkg / "kern_cuda.so")
    (pkg / "__init__.py").write_text("VALUE = 1\n")
    target = "site/kern" if relative else str(pkg)
    done = flashbuild(target, "--arch", "sm_90a", "--json", "--no-gpu", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert doc["subject"] == str(pkg) and doc["ok"] is True
    imported = next(c for c in doc["checks"] if c["area"] == "import")
    assert imported["status"] == "ok" and str(pkg) in imported["summary"]
