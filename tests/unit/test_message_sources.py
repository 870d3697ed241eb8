"""What a message cites, the user can open: no user-visible text names FACTS.md or cites it as
"(FACTS: section)" (a file of the team's shared folder, not of this repository), and every
`docs/…md#anchor` a message cites exists, file and section. The scan rules' texts cite a section
of docs/scan.md, and that section names the upstream page SARIF gets as the rule's helpUri."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from flashbuild.arch import FIRST_CUDA, MAX_SMEM_PER_BLOCK, REMOVED_IN, Arch, Suffix
from flashbuild.scanning.ptx_table import INSTRUCTIONS
from flashbuild.scanning.rules import RULES
from tests.pysource import parse_file

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "flashbuild"
DOC_LINK = re.compile(r"docs/([\w.-]+\.md)(?:#([\w-]+))?")
#: A citation of the team's private facts file, as "FACTS.md" or "(FACTS: <section>)".
FACTS_CITATION = re.compile(r"\bFACTS\b")


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
        tree = parse_file(path)  # once per process: tests/pysource.py
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


def section(doc: Path, anchor: str) -> str:
    """The text of the section whose heading has this anchor, up to the next heading of the
    same or a higher level."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if line.startswith("#") and slug(line.lstrip("#")) == anchor:
            level = len(line) - len(line.lstrip("#"))
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("#")
                        and len(lines[j]) - len(lines[j].lstrip("#")) <= level), len(lines))
            return "\n".join(lines[i:end])
    raise AssertionError(f"no section {anchor} in {doc.name}")


def test_no_user_visible_text_cites_facts_md() -> None:
    cited = [(f, n) for f, n, text in message_strings() if FACTS_CITATION.search(text)]
    assert not cited, f"user-visible strings cite FACTS.md (not in this repo): {cited}"


def test_facts_citation_pattern_catches_both_spellings() -> None:
    assert FACTS_CITATION.search("exist with MSVC (FACTS: MSVC flags).")
    assert FACTS_CITATION.search("see FACTS.md")
    assert not FACTS_CITATION.search("typed facts, FACTSHEET")


def test_no_doc_cites_facts_md() -> None:
    """docs/ and the README are what a user reads next to the messages."""
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            assert not FACTS_CITATION.search(line), f"{doc.name}:{n} cites FACTS: {line}"


def test_scan_rules_cite_docs_sections_that_exist() -> None:
    """Every docs/ link of a rule's help names an existing file and heading; a rule with an
    upstream page (SARIF's helpUri) cites the docs/scan.md section that names that page."""
    cited = 0
    for rule in RULES.values():
        links = list(DOC_LINK.finditer(rule.help))
        for m in links:
            doc = ROOT / "docs" / m[1]
            assert doc.is_file(), f"{rule.id} cites docs/{m[1]}, which does not exist"
            assert m[2], f"{rule.id} cites docs/{m[1]} without a section"
            assert m[2] in anchors(doc), f"{rule.id} cites docs/{m[1]}#{m[2]}: no such heading"
        cited += bool(links)
        if rule.help_uri is not None:
            assert rule.help_uri.startswith("https://"), rule.id
            sections = [section(ROOT / "docs" / m[1], m[2]) for m in links if m[1] == "scan.md"]
            assert any(rule.help_uri in s for s in sections), (
                f"{rule.id}: helpUri {rule.help_uri} is not named in the section it cites")
    assert cited >= 19  # FB010, and FB101 … FB220 where a fact is cited


def test_scan_md_instruction_table_is_the_ptx_table() -> None:
    text = section(ROOT / "docs" / "scan.md", "instructions-per-target")
    rows = dict(re.findall(r"^\| `([^`]+)` \| ([^|]+?) \|$", text, re.MULTILINE))
    assert rows == {name: i.needs for name, i in INSTRUCTIONS.items()}


def test_scan_md_shared_memory_table_is_arch_py() -> None:
    text = section(ROOT / "docs" / "scan.md", "shared-memory-per-block")
    rows = re.findall(r"^\| (sm_[^|]+?) \| (\d+) \((\d+) KB\) \|$", text, re.MULTILINE)
    table = {int(code): int(size) for names, size, _ in rows
             for code in re.findall(r"sm_(\d+)", names)}
    assert table == MAX_SMEM_PER_BLOCK
    assert all(int(size) // 1024 == int(kb) for _, size, kb in rows)


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
