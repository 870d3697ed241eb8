"""Encodings in a step's globs (issue 22): a Latin-1 or UTF-16 `.cu` was skipped without a
word, an explicit instantiation in it neither guarded nor counted, and `expect sites = N`
passed. Now (docs/reliability.md "Encodings"): UTF-8, UTF-16 with a BOM and NUL-free
non-UTF-8 text (read as Latin-1, byte for byte) are read, edited and written back in their
own encoding; a file that is not text (NUL bytes without a BOM) is reported by the step, and
a step with `expect` fails on it. Apply and `--revert` are byte-exact."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.reliability.helpers import Outcome, judge, record, snapshot

if TYPE_CHECKING:
    from tests.reliability.helpers import Sandbox

PATCH = 5
KERNEL = ("// {note}\ntemplate <typename T>\n"
          "__global__ void k(T* __restrict__ x) {{ x[0] = T(1); }}\n"
          "template __global__ void k<float>(float*);\n")
STEP = """[recipe]
name = "enc"

[source]
path = "../tree"
sources = ["k/*.cu"]

[[patch]]
id = "guard"
transform = "explicit-instantiations"
params = {{ files = ["k/*.cu"], mode = "guard" }}
{expect}
"""
GUARDED = "#if !defined(_MSC_VER)"


def _tree(box: Sandbox, files: dict[str, bytes], expect: str) -> list[str]:
    (box.tree / "k").mkdir()
    for name, data in files.items():
        (box.tree / "k" / name).write_bytes(data)
    box.pristine = snapshot(box.tree)
    (box.recipe_dir / "enc.toml").write_text(STEP.format(expect=expect))
    box._outside = box.outside()
    return ["patch", "--recipe", str(box.recipe_dir / "enc.toml"), "--source", str(box.tree),
            "--platform", "windows", "--arch", "sm120"]


UTF8 = KERNEL.format(note="café, UTF-8").encode("utf-8")
ENCODED = {
    "Latin-1": KERNEL.format(note="café, Latin-1").encode("latin-1"),
    "UTF-16 LE with BOM": b"\xff\xfe" + KERNEL.format(note="café, UTF-16").encode("utf-16-le"),
    "UTF-16 BE with BOM": b"\xfe\xff" + KERNEL.format(note="café, UTF-16").encode("utf-16-be"),
    "UTF-8 with BOM, CRLF": b"\xef\xbb\xbf" + KERNEL.format(note="café").replace(
        "\n", "\r\n").encode("utf-8"),
}


@pytest.mark.parametrize("name", list(ENCODED))
def test_a_file_in_another_encoding_is_counted_edited_kept_and_reverted(box: Sandbox,
                                                                        name: str) -> None:
    data = ENCODED[name]
    args = _tree(box, {"a.cu": UTF8, "b.cu": data}, "expect = { sites = 1 }")
    # One site per file: `expect sites = 1` must now fail (it passed, b.cu unread).
    judge(f"encoding: {name}, expect counts it", box, box.cli(*args), code=PATCH,
          tree=box.pristine, say="expected 1 sites, found 2")
    (box.recipe_dir / "enc.toml").write_text(STEP.format(expect="expect = { sites = 2 }"))
    applied = box.cli(*args)
    edited = (box.tree / "k" / "b.cu").read_bytes()
    encoding = {"Latin-1": "latin-1", "UTF-16 LE with BOM": "utf-16-le",
                "UTF-16 BE with BOM": "utf-16-be"}.get(name, "utf-8")
    kept = edited.startswith(data[:2]) and GUARDED in edited.decode(encoding)
    reverted = box.cli(*args, "--revert")
    exact = snapshot(box.tree) == box.pristine or {
        k: v for k, v in snapshot(box.tree).items() if not k.startswith(".flashbuild")
    } == box.pristine
    record(f"encoding: {name}, apply and revert", clear_error=None, data_lost=not exact,
           tree_changed=not exact, hang=applied.hang or reverted.hang,
           internal=applied.internal or reverted.internal)
    assert applied.code == 0 and reverted.code == 0, applied.output + reverted.output
    assert kept, edited
    assert exact


BINARY = {
    "UTF-16 without a BOM": KERNEL.format(note="no BOM").encode("utf-16-le"),
    "NUL bytes": b"\x00\x01" + UTF8,
    "UTF-16 BOM, then garbage": b"\xff\xfe" + b"\x00\xd8\x00\xd8",
}


@pytest.mark.parametrize("name", list(BINARY))
def test_an_unreadable_file_fails_a_step_with_expect(box: Sandbox, name: str) -> None:
    args = _tree(box, {"a.cu": UTF8, "b.cu": BINARY[name]}, "expect = { sites = 1 }")
    out = box.cli(*args)
    judge(f"encoding: {name}, expect", box, out, code=PATCH, tree=box.pristine,
          say="1 file(s) of its globs could not be read")
    assert "k/b.cu" in out.output


@pytest.mark.parametrize("name", list(BINARY))
def test_an_unreadable_file_is_reported_by_a_step_without_expect(box: Sandbox,
                                                                 name: str) -> None:
    args = _tree(box, {"a.cu": UTF8, "b.cu": BINARY[name]}, "")
    out: Outcome = box.cli(*args, "--dry-run")
    judge(f"encoding: {name}, no expect", box, out, code=0, tree=box.pristine,
          say="k/b.cu: not read, not searched")


def test_a_unified_diff_keeps_a_latin1_file_latin1(box: Sandbox) -> None:
    from tests.reliability.helpers import MATH, WIN120

    (box.tree / "src" / "math.cpp").write_bytes(b"// caf\xe9 (Latin-1)\n" + MATH)
    box.pristine = snapshot(box.tree)
    applied = box.cli(*box.patch_args(*WIN120))
    edited = (box.tree / "src" / "math.cpp").read_bytes()
    reverted = box.cli(*box.patch_args(*WIN120, "--revert"))
    after = {k: v for k, v in snapshot(box.tree).items() if not k.startswith(".flashbuild")}
    record("encoding: Latin-1 file under a unified diff", clear_error=None,
           data_lost=after != box.pristine, tree_changed=after != box.pristine,
           hang=applied.hang or reverted.hang, internal=applied.internal or reverted.internal)
    assert applied.code == 0 and reverted.code == 0, applied.output + reverted.output
    assert edited.startswith(b"// caf\xe9 (Latin-1)\n") and b"return a * b;" in edited
    assert after == box.pristine


@pytest.mark.parametrize(("name", "diff"), [
    ("NUL bytes in the diff", b"--- a/src/math.cpp\n+++ b/src/math.cpp\n@@ -1 +1 @@\n"
                              b"-int add(int a, int b) {\n+int add(int a, int b) {\x00\n"),
    ("GIT binary patch", b"diff --git a/src/b.bin b/src/b.bin\nindex 1111111..2222222 100644\n"
                         b"GIT binary patch\nliteral 5\nMcmZQzVr2OA000gM00RI3\n\n"),
    ("Binary files differ", b"diff --git a/src/b.bin b/src/b.bin\nindex 1111111..2222222 "
                            b"100644\nBinary files a/src/b.bin and b/src/b.bin differ\n"),
])
def test_a_binary_diff_is_one_paragraph_with_a_fix(box: Sandbox, name: str,
                                                   diff: bytes) -> None:
    (box.recipe_dir / "add_mul.patch").write_bytes(diff)
    box._outside = box.outside()
    out = box.cli(*box.patch_args("--platform", "linux", "--arch", "sm_90a"))
    judge(f"encoding: a unified diff with {name}", box, out, code=PATCH, tree=box.pristine)


def test_a_latin1_diff_edits_a_latin1_file(box: Sandbox) -> None:
    from tests.reliability.helpers import MATH

    (box.tree / "src" / "math.cpp").write_bytes(b"// caf\xe9\n" + MATH)
    box.pristine = snapshot(box.tree)
    (box.recipe_dir / "add_mul.patch").write_bytes(
        b"--- a/src/math.cpp\n+++ b/src/math.cpp\n@@ -1,2 +1,2 @@\n-// caf\xe9\n+// na\xefve\n"
        b" int add(int a, int b) {\n")
    box._outside = box.outside()
    out = box.cli(*box.patch_args("--platform", "linux", "--arch", "sm_90a"))
    judge("encoding: a Latin-1 diff of a Latin-1 file", box, out, code=0)
    assert (box.tree / "src" / "math.cpp").read_bytes() == b"// na\xefve\n" + MATH
