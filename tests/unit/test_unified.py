"""The unified-diff applier: offsets, fuzz, line endings, already-applied, refusals."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flashbuild.errors import PatchError, TreeError
from flashbuild.patching.tree import Tree
from flashbuild.patching.unified import plan_diff

if TYPE_CHECKING:
    from pathlib import Path

BASE = [f"line {i}\n" for i in range(40)]


def make_diff(before: list[str], after: list[str], path: str = "f.txt", n: int = 3) -> str:
    return "".join(difflib.unified_diff(before, after, f"a/{path}", f"b/{path}", n=n))


def tree_with(tmp: Path, content: bytes, name: str = "f.txt") -> Tree:
    (tmp / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp / name).write_bytes(content)
    return Tree(tmp)


def edited(lines: list[str]) -> list[str]:
    out = list(lines)
    out[20] = "line twenty\n"
    out.insert(21, "an added line\n")
    return out


def test_exact_apply(tmp_path: Path) -> None:
    tree = tree_with(tmp_path, "".join(BASE).encode())
    result = plan_diff(make_diff(BASE, edited(BASE)), tree)
    assert result.changes["f.txt"] == "".join(edited(BASE)).encode()
    (hunk,) = result.files[0].hunks
    assert (hunk.status, hunk.offset, hunk.fuzz) == ("applied", 0, 0)


def test_offset_is_found_and_reported(tmp_path: Path) -> None:
    shifted = ["new header\n"] * 7 + BASE
    tree = tree_with(tmp_path, "".join(shifted).encode())
    result = plan_diff(make_diff(BASE, edited(BASE)), tree)
    assert result.changes["f.txt"] == "".join(["new header\n"] * 7 + edited(BASE)).encode()
    assert result.files[0].hunks[0].offset == 7


def test_crlf_file_stays_crlf_and_no_final_newline_kept(tmp_path: Path) -> None:
    crlf = "".join(BASE).replace("\n", "\r\n").rstrip("\r\n").encode()
    tree = tree_with(tmp_path, crlf)
    result = plan_diff(make_diff(BASE, edited(BASE)), tree)
    expected = "".join(edited(BASE)).replace("\n", "\r\n").rstrip("\r\n").encode()
    assert result.changes["f.txt"] == expected


def test_already_applied_is_a_no_op(tmp_path: Path) -> None:
    tree = tree_with(tmp_path, "".join(edited(BASE)).encode())
    result = plan_diff(make_diff(BASE, edited(BASE)), tree)
    assert result.changes == {}
    assert result.files[0].status == "already"


def test_pure_addition_already_applied(tmp_path: Path) -> None:
    after = [*BASE[:10], "inserted\n", *BASE[10:]]
    tree = tree_with(tmp_path, "".join(after).encode())
    assert plan_diff(make_diff(BASE, after), tree).changes == {}


def test_context_gone_fails_with_closest_lines_and_fuzz_rescues(tmp_path: Path) -> None:
    drifted = list(BASE)
    drifted[18] = "line 18 (changed upstream)\n"
    tree = tree_with(tmp_path, "".join(drifted).encode())
    diff = make_diff(BASE, edited(BASE))
    with pytest.raises(PatchError) as info:
        plan_diff(diff, tree, name="p.patch")
    err = info.value
    assert "hunk `@@ -18,7 +18,8 @@` of p.patch does not apply to `f.txt`" in err.what
    assert "line 18 (changed upstream)" in err.evidence  # the closest lines found
    assert "expected" in err.evidence and "fuzz = 1" in err.fix
    result = plan_diff(diff, tree, fuzz=2)
    assert result.files[0].hunks[0].fuzz >= 1
    text = result.changes["f.txt"].decode()
    assert "line twenty\nan added line\nline 21\n" in text
    assert "line 18 (changed upstream)\n" in text


@pytest.mark.parametrize("path", ["../outside.txt", "/etc/passwd", "a/../../x"])
def test_paths_out_of_the_tree_are_refused(tmp_path: Path, path: str) -> None:
    tree = tree_with(tmp_path / "t", b"x\n")
    diff = f"--- {path}\n+++ {path}\n@@ -1 +1 @@\n-x\n+y\n"
    with pytest.raises(TreeError):
        plan_diff(diff, tree)


def test_symlink_out_of_the_tree_is_refused(tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("x\n")
    tree_with(tmp_path / "t", b"x\n")
    (tmp_path / "t" / "link.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(TreeError, match="symlink"):
        plan_diff("--- a/link.txt\n+++ b/link.txt\n@@ -1 +1 @@\n-x\n+y\n", Tree(tmp_path / "t"))


def test_not_a_diff_and_binary_are_refused(tmp_path: Path) -> None:
    tree = tree_with(tmp_path, b"x\n")
    with pytest.raises(PatchError, match="not a unified diff"):
        plan_diff("this is a README, not a patch\n", tree)
    binary = ("diff --git a/img.png b/img.png\nindex 1..2 100644\n"
              "Binary files a/img.png and b/img.png differ\n")
    with pytest.raises(PatchError, match="binary"):
        plan_diff(binary, tree)
    (tmp_path / "blob.bin").write_bytes(b"\0\1\2x\n")
    with pytest.raises(PatchError, match="binary file"):
        plan_diff("--- a/blob.bin\n+++ b/blob.bin\n@@ -1 +1 @@\n-x\n+y\n", Tree(tmp_path))


def test_new_and_deleted_files(tmp_path: Path) -> None:
    tree = tree_with(tmp_path, b"old 1\nold 2\n", "gone.txt")
    diff = ("--- /dev/null\n+++ b/sub/new.txt\n@@ -0,0 +1,2 @@\n+hello\n+world\n"
            "--- a/gone.txt\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-old 1\n-old 2\n")
    result = plan_diff(diff, tree)
    assert result.changes == {"sub/new.txt": b"hello\nworld\n", "gone.txt": None}
    tree.plan("sub/new.txt", b"hello\nworld\n")
    tree.plan("gone.txt", None)
    assert plan_diff(diff, tree).changes == {}


def test_no_newline_marker_on_new_file(tmp_path: Path) -> None:
    diff = "--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1 @@\n+last\n\\ No newline at end of file\n"
    assert plan_diff(diff, Tree(tmp_path)).changes == {"n.txt": b"last"}


# Numbered lines: every hunk's pre-image differs from its post-image wherever it could match.
# With repeated lines (five empty ones, one deleted) both images match the same place and no
# applier can tell applied from not applied: test_ambiguous_hunk_counts_as_applied pins that.
lines_st = st.lists(st.text(alphabet="abc xyz{};", min_size=0, max_size=8), min_size=1,
                    max_size=30).map(lambda ls: [f"{i}: {t}" for i, t in enumerate(ls)])


def _edit(lines: list[str], data: st.DataObject) -> list[str]:
    out = list(lines)
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["insert", "delete", "replace"]))
        at = data.draw(st.integers(0, max(len(out) - 1, 0)))
        if op == "insert" or not out:
            out.insert(at, data.draw(st.text(alphabet="ABC", min_size=1, max_size=5)))
        elif op == "delete" and len(out) > 1:
            del out[at]
        else:
            out[at] = data.draw(st.text(alphabet="ABC", min_size=1, max_size=5))
    return out


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=lines_st, data=st.data(), crlf=st.booleans(), prefix=st.integers(0, 5))
def test_property_apply_then_reverse_is_identity(tmp_path_factory: pytest.TempPathFactory,
                                                  lines: list[str], data: st.DataObject,
                                                  crlf: bool, prefix: int) -> None:
    after = _edit(lines, data)
    eol = "\r\n" if crlf else "\n"
    before_lf = [f"{line}\n" for line in lines]
    after_lf = [f"{line}\n" for line in after]
    diff = make_diff(before_lf, after_lf)
    if not diff:
        return
    head = [f"unrelated {i}" for i in range(prefix)]  # shifts every hunk: offsets found
    original = eol.join(head + lines) + eol
    tree = tree_with(tmp_path_factory.mktemp("p"), original.encode())
    forward = plan_diff(diff, tree).changes["f.txt"]
    assert forward is not None
    assert forward == (eol.join(head + after) + eol).encode()  # line endings preserved
    tree.plan("f.txt", forward)
    back = plan_diff(diff, tree, reverse=True).changes["f.txt"]
    assert back == original.encode()


def test_mixed_line_endings_each_context_line_keeps_its_own(tmp_path: Path) -> None:
    # An LF line after an insertion in a mostly-CRLF file stays LF: only added lines take the
    # file's dominant ending.
    lines = [f"line {i}" for i in range(10)]
    eols = ["\r\n"] * 10
    eols[6] = "\n"
    tree = tree_with(tmp_path, "".join(a + b for a, b in zip(lines, eols, strict=True)).encode())
    after = [*lines[:5], "added", *lines[5:]]
    diff = make_diff([x + "\n" for x in lines], [x + "\n" for x in after])
    result = plan_diff(diff, tree)
    want = [*eols[:5], "\r\n", *eols[5:]]
    assert result.changes["f.txt"] == "".join(
        a + b for a, b in zip(after, want, strict=True)).encode()


def test_fuzz_offset_counts_only_the_context_really_dropped(tmp_path: Path) -> None:
    # A hunk at the top of the file has no leading context: fuzz drops only trailing lines,
    # so the hunk did not move and its offset is 0.
    after = ["new first\n", *BASE]
    drifted = list(BASE)
    drifted[2] = "line 2 (changed upstream)\n"
    tree = tree_with(tmp_path, "".join(drifted).encode())
    result = plan_diff(make_diff(BASE, after), tree, fuzz=1)
    (hunk,) = result.files[0].hunks
    assert (hunk.fuzz, hunk.offset, hunk.line) == (1, 0, 1)
    assert result.changes["f.txt"] == "".join(["new first\n", *drifted]).encode()


def test_ambiguous_hunk_counts_as_applied(tmp_path: Path) -> None:
    """Five empty lines, the last deleted: the reversed hunk's source (three empty lines) and
    target (four) both match the patched file. The longer match wins (the hunk counts as
    there already), so the reverse changes nothing rather than adding a line by guesswork."""
    lines = ["\n"] * 5
    diff = make_diff(lines, lines[:4])
    tree = tree_with(tmp_path, ("top\n" + "".join(lines)).encode())
    forward = plan_diff(diff, tree).changes["f.txt"]
    assert forward == ("top\n" + "".join(lines[:4])).encode()
    tree.plan("f.txt", forward)
    back = plan_diff(diff, tree, reverse=True)
    assert back.changes == {}
    assert [f.status for f in back.files] == ["already"]
