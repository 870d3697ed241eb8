"""What a message cites, the user can open: no user-visible text names FACTS.md (a file of the
team's shared folder, not of this repository), and every `docs/…md#anchor` a message cites
exists, file and section."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from flashbuild.arch import FIRST_CUDA, REMOVED_IN, Arch, Suffix

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "flashbuild"
DOC_LINK = re.compile(r"docs/([\w.-]+\.md)(?:#([\w-]+))?")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are documentation: a bare string statement (module,
    class, function and attribute docstrings). Everything else may reach a user."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)}


def message_strings() -> list[tuple[str, int, str]]:
    """(file, line, text) of every string literal in flashbuild/ that is not a docstring
    (f-string parts included; comments are not strings)."""
    found: list[tuple[str, int, str]] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docs):
                found.append((str(path.relative_to(ROOT)), node.lineno, node.value))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in doc.read_text(encoding="utf-8").splitlines()
            if line.startswith("#")}


def test_no_user_visible_text_cites_facts_md() -> None:
    cited = [(f, n) for f, n, text in message_strings() if "FACTS.md" in text]
    assert not cited, f"user-visible strings cite FACTS.md (not in this repo): {cited}"


def test_every_docs_link_a_message_cites_exists() -> None:
    links = [(f, n, m[1], m[2]) for f, n, text in message_strings()
             for m in DOC_LINK.finditer(text)]
    assert any(a == "which-cuda-toolkit-a-build-uses" for *_, a in links)  # the scan works
    for file, line, doc, anchor in links:
        path = ROOT / "docs" / doc
        assert path.is_file(), f"{file}:{line} cites docs/{doc}, which does not exist"
        if anchor:
            assert anchor in anchors(path), f"{file}:{line} cites docs/{doc}#{anchor}"


def test_the_rules_cite_docs_sections_that_exist() -> None:
    """The doctor rules that used to cite FACTS.md, run: their texts cite what exists."""
    from flashbuild.detect.rules import evaluate
    from tests.unit.test_detect_rules import RTX5090, findings, gpus, search, toolkit

    cases = [
        findings(toolkits=search(toolkit("12.8")), targets=(Arch(12, 1),)),  # too old
        findings(gpus=gpus(RTX5090), targets=(Arch(9, 0, Suffix.ARCH),)),  # `a` elsewhere
    ]
    texts = [" ".join((v.title, v.evidence, v.fix)) for f in cases for v in evaluate(f)]
    assert not [t for t in texts if "FACTS" in t]
    cited = [m for t in texts for m in DOC_LINK.finditer(t)]
    assert cited
    for m in cited:
        assert m[2] in anchors(ROOT / "docs" / m[1])


def test_the_docs_table_of_first_cuda_releases_is_arch_py() -> None:
    """docs/pipeline.md's table is read by people; flashbuild/arch.py by the code: one fact."""
    text = (ROOT / "docs" / "pipeline.md").read_text(encoding="utf-8")
    section = text.split("## Which CUDA toolkit a build uses", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (sm_[^|]+?) \| (\d+\.\d+) \|$", section, re.MULTILINE)
    assert len(rows) == 4
    for names, release in rows:
        for code in re.findall(r"sm_(\d+)", names):
            assert FIRST_CUDA[int(code)] == release, (code, release)
    assert "CUDA 13.0 dropped sm_50 to sm_72 and sm_101" in section
    assert set(REMOVED_IN) == {50, 52, 53, 60, 61, 62, 70, 72, 101}
