"""Hostile inputs to `flashbuild verify` (issue 22): damaged and bomb fatbins, hostile wheels
and RECORDs, non-regular files. Each case runs the real CLI in a fresh interpreter that reports
its own peak memory (VmHWM from /proc/self/status): verify of any input must stay under
512 MiB whatever the input claims, and must fail (exit 8, one paragraph) where today it passed
with a warning, read a file outside the wheel, blocked or crashed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from flashbuild.installing.manifest import Artifact, HostCompiler, Manifest, Toolkit
from tests.hostile import (
    GiB,
    TiB,
    bomb_object,
    elf_with_fatbin,
    fatbin,
    fatbin_entry,
    zstd_zeros,
)
from tests.reliability.helpers import HANG_S, Outcome, judge_outcome

V = Path(__file__).resolve().parent.parent / "fixtures" / "verify"
VERIFY = 8
MiB = 1024 * 1024
#: The promise (issue 22, docs/reliability.md): verify's peak memory whatever the input claims.
RSS_LIMIT_KIB = 512 * 1024
WHEEL_META = {
    "kern-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: false\n"
                                "Tag: cp311-cp311-linux_x86_64\n",
    "kern-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: kern\nVersion: 1.0\n",
}
# Runs flashbuild's CLI, then writes this process's peak resident memory to argv[1].
_PEAK = """
import runpy, sys
out, sys.argv = sys.argv[1], ["flashbuild", *sys.argv[2:]]
code = 0
try:
    runpy.run_module("flashbuild", run_name="__main__")
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
finally:
    peak = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")]
    open(out, "w").write(peak[0].split()[1] if peak else "0")
sys.exit(code)
"""


def verify(tmp: Path, *args: str, env: dict[str, str] | None = None) -> tuple[Outcome, int]:
    """`flashbuild verify ARGS` in a fresh interpreter: the outcome and its peak RSS (KiB)."""
    peak = tmp / "peak.txt"
    run_env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", **(env or {})}
    try:
        done = subprocess.run([sys.executable, "-c", _PEAK, str(peak), "verify", *args],
                              cwd=tmp, env=run_env, capture_output=True, text=True,
                              timeout=HANG_S, check=False)
    except subprocess.TimeoutExpired:
        return Outcome(-1, "", HANG_S, hang=True), 0
    kib = int(peak.read_text() or 0) if peak.is_file() else 0
    return Outcome(done.returncode, done.stdout + done.stderr, 0.0), kib


def check(case: str, tmp: Path, *args: str, code: int = VERIFY, say: str = "",
          env: dict[str, str] | None = None) -> Outcome:
    out, kib = verify(tmp, *args, env=env)
    judge_outcome(case, out, code=code, say=say)
    assert 0 < kib < RSS_LIMIT_KIB, f"{case}: peak RSS {kib} KiB"
    return out


# --- damaged and bomb fatbins ---------------------------------------------------------------

BOMBS = {
    # A 16 GiB zstd bomb that says so in its entry header: refused before decoding.
    "16 GiB bomb, honest claim": (lambda: bomb_object(16 * GiB), "claims 17,179,869,184"),
    # The same bomb whose entry claims 1 MiB and whose frame declares no size: decoding is
    # streamed and stops just past the claim.
    "16 GiB bomb, lying claim": (lambda: bomb_object(16 * GiB, claim=MiB, declare_size=False),
                                 "decompresses to more than"),
    # No claim and no frame size: stopped at the 128 MiB cap.
    "16 GiB bomb, no claim": (lambda: bomb_object(16 * GiB, claim=0, declare_size=False),
                              "passed 134,217,728 bytes"),
    # An entry claiming a 1 TiB uncompressed image (3 GiB and 1 TiB passed with a warning).
    "1 TiB claim": (lambda: bomb_object(MiB, claim=TiB), "(1.0 TiB)"),
    "3 GiB bomb": (lambda: bomb_object(3 * GiB), "claims 3,221,225,472"),
    # Honest and under the cap, but zeros are no cubin.
    "zeros, not a cubin": (lambda: bomb_object(MiB), "the sm_90 cubin is damaged"),
    # A frame cut short: zstd's own error.
    "cut zstd frame": (lambda: elf_with_fatbin(fatbin(fatbin_entry(
        zstd_zeros(4 * MiB)[:9], compressed=True, uncompressed=4 * MiB))),
        "decompresses to 0 bytes; its entry header claims 4,194,304"),
    # An entry whose payload size claims 1 TiB: the container cannot hold it.
    "1 TiB payload": (lambda: elf_with_fatbin(fatbin(fatbin_entry(b"x" * 64,
                                                                  payload_size=TiB))),
                      "needs 1099511627776 bytes"),
}


@pytest.mark.parametrize("name", list(BOMBS))
def test_damaged_and_bomb_fatbins_fail_in_bounded_memory(tmp_path: Path, name: str) -> None:
    build, say = BOMBS[name]
    (tmp_path / "_C.so").write_bytes(build())
    check(f"fatbin: {name}", tmp_path, "_C.so", "--arch", "sm_90", say=say)


def test_a_bomb_inside_a_wheel(tmp_path: Path) -> None:
    write_wheel(tmp_path / "kern-1.0-cp311-cp311-linux_x86_64.whl",
                {"kern/_C.so": bomb_object(16 * GiB), "kern/__init__.py": "", **WHEEL_META})
    check("wheel: 16 GiB bomb inside", tmp_path, "kern-1.0-cp311-cp311-linux_x86_64.whl",
          "--arch", "sm_90", say="larger than flashbuild reads (128 MiB per image")


# --- hostile wheels and RECORDs -------------------------------------------------------------


def write_wheel(path: Path, members: dict[str, str | bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def manifest_json(*paths: str) -> str:
    import json

    manifest = Manifest(flashbuild="0.1.0", recipe="x", platform="linux", archs="90a-real",
                        toolkit=Toolkit(root="/cuda", version="13.0"),
                        host_compiler=HostCompiler(kind="gcc", version="12", path="g++"),
                        artifacts=tuple(Artifact(path=p, kind="module") for p in paths))
    return json.dumps(manifest.to_json())


@pytest.mark.parametrize("named", ["../x.so", "../../x.so", "/ABS/x.so", "kern/../../x.so"])
def test_a_wheel_manifest_names_only_wheel_members(tmp_path: Path, named: str) -> None:
    # Today `../x.so` made verify check a file beside the temp folder, and pass.
    temp = tmp_path / "t"
    temp.mkdir()
    good = (V / "sass_sm90a.o").read_bytes()
    (temp / "x.so").write_bytes(good)
    (tmp_path / "x.so").write_bytes(good)
    named = named.replace("/ABS", str(tmp_path))
    write_wheel(tmp_path / "kern-1.0-cp311-cp311-linux_x86_64.whl", {
        "kern/_C.so": good, "flashbuild-manifest.json": manifest_json(named), **WHEEL_META})
    check(f"wheel: manifest names {named.replace(str(tmp_path), '/ABS')}", tmp_path,
          "kern-1.0-cp311-cp311-linux_x86_64.whl", say="names files outside the wheel"
          if named == "../x.so" else "leaves the package folder",
          env={"TMPDIR": str(temp)})


def make_site(tmp: Path, record: bytes) -> Path:
    site = tmp / "site"
    (site / "fakekern").mkdir(parents=True)
    (site / "fakekern" / "__init__.py").write_text("")
    shutil.copy(V / "sass_sm90a.o", site / "fakekern" / "_C.so")
    info = site / "fake_kern-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-kern\nVersion: 0.1\n")
    (info / "RECORD").write_bytes(record)
    return site


RECORDS = {
    "garbage": b"\xff\xfe\x00garbage\x80\x81\n\x00\x00",
    "UTF-16": "fakekern/__init__.py,,\nfakekern/_C.so,,\n".encode("utf-16"),
}


@pytest.mark.parametrize("name", list(RECORDS))
def test_a_damaged_record_is_one_paragraph(tmp_path: Path, name: str) -> None:
    site = make_site(tmp_path, RECORDS[name])
    check(f"RECORD: {name}", tmp_path, "--package", "fake-kern", "--arch", "sm_90a",
          "--no-gpu", say="RECORD", env={"PYTHONPATH": f"{site}{os.pathsep}"
                                          f"{os.environ.get('PYTHONPATH', '')}"})


# --- non-regular files ----------------------------------------------------------------------


def _fifo(tmp: Path) -> str:
    os.mkfifo(tmp / "_C.so")
    return "_C.so"


def _dev_zero(tmp: Path) -> str:
    return "/dev/zero"


def _link_to_dev_zero(tmp: Path) -> str:
    (tmp / "_C.so").symlink_to("/dev/zero")
    return "_C.so"


def _fifo_manifest(tmp: Path) -> str:
    os.mkfifo(tmp / "flashbuild-manifest.json")
    return "flashbuild-manifest.json"


NON_REGULAR = {"FIFO named .so": (_fifo, "a FIFO"), "/dev/zero": (_dev_zero, "character device"),
               "symlink to /dev/zero": (_link_to_dev_zero, "a symlink to /dev/zero"),
               "FIFO named as the manifest": (_fifo_manifest, "a FIFO")}


@pytest.mark.parametrize("name", list(NON_REGULAR))
def test_non_regular_files_are_refused_before_open(tmp_path: Path, name: str) -> None:
    make, kind = NON_REGULAR[name]
    target = make(tmp_path)
    out = check(f"non-regular: {name}", tmp_path, target, "--arch", "sm_90",
                say="is not a regular file, so it was not opened")
    assert kind in " ".join(out.output.split())


def test_non_regular_files_in_a_folder_are_skipped(tmp_path: Path) -> None:
    # A folder walk lists regular files only: a FIFO or device link named .so is never opened.
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    shutil.copy(V / "sass_sm90a.o", pkg / "_C.so")
    os.mkfifo(pkg / "fifo.so")
    (pkg / "zero.so").symlink_to("/dev/zero")
    out, kib = verify(tmp_path, "pkg", "--arch", "sm_90a", "--no-gpu")
    judge_outcome("non-regular: FIFO and /dev/zero link in a folder", out, code=0)
    assert "fifo.so" not in out.output and "zero.so" not in out.output
    assert 0 < kib < RSS_LIMIT_KIB
