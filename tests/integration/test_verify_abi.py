"""verify's manylinux check on a binary built here that needs GLIBC_2.38 (issue 31)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from flashbuild.verifying.abi import needed_versions, policy_named, violations

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")]


def _needs_glibc_238(tmp_path: Path) -> Path:
    """A .so that needs GLIBC_2.38 although this host's glibc is older: linked against a
    stub libc.so.6 whose version script defines GLIBC_2.38 (as glibc 2.38+ does for
    __isoc23_strtol)."""
    (tmp_path / "stub.c").write_text("long __isoc23_strtol(const char *s, char **e, int b)"
                                     " { return 0; }\n")
    (tmp_path / "stub.map").write_text("GLIBC_2.38 { global: __isoc23_strtol; };\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "libc.so.6"),
                    "-Wl,-soname,libc.so.6", "-Wl,--version-script",
                    str(tmp_path / "stub.map"), str(tmp_path / "stub.c")], check=True)
    (tmp_path / "ext.c").write_text(
        "long __isoc23_strtol(const char *, char **, int);\n"
        "long parse(const char *s) { return __isoc23_strtol(s, 0, 10); }\n")
    out = tmp_path / "ext.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-nostdlib", "-o", str(out),
                    str(tmp_path / "ext.c"), str(tmp_path / "libc.so.6")], check=True)
    return out


def test_glibc_238_is_an_error_under_manylinux_2_28(tmp_path: Path) -> None:
    binary = _needs_glibc_238(tmp_path)
    assert any(n.label == "GLIBC_2.38" for n in needed_versions(binary))
    lines = violations(binary, policy_named("manylinux_2_28"))
    assert len(lines) == 1
    assert "GLIBC_2.38" in lines[0] and "GLIBC_2.28" in lines[0]
    assert violations(binary, policy_named("manylinux_2_34")) != []
    assert all(len(line) < 200 and line.isascii() for line in lines)


def test_verify_policy_option_fails_the_binary(tmp_path: Path) -> None:
    binary = _needs_glibc_238(tmp_path)
    result = subprocess.run([sys.executable, "-m", "flashbuild", "verify", str(binary),
                             "--policy", "manylinux_2_28", "--no-gpu", "--json"],
                            capture_output=True, text=True, check=False, timeout=60)
    abi_checks = [c for c in json.loads(result.stdout)["checks"] if c["area"] == "abi"]
    assert result.returncode == 8
    assert [c["status"] for c in abi_checks] == ["fail"]
    assert "GLIBC_2.38" in abi_checks[0]["evidence"]
