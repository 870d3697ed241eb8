"""The corpus answer key, every tree and target, as a Markdown table (the README's table).

    python bench/corpus_scores.py [--corpus ../shared/corpus] [--work DIR]

For each tree of `expected.json` (unpacked from its tarball beside it) and each of its targets
(`windows/sm120`, `linux/sm120`): `flashbuild scan TREE --platform P --arch sm120 --json` in a
fresh process, twice — the first run (introspection configures or records the tree, when the
target is this machine's platform; otherwise static reading) and the re-scan of the unchanged
tree — then the corpus's own `score.py` on the first report. Columns: recall, errors against
the key's maximum, the verdict, both wall times, and what decided what is compiled (the
report's `truth`, up to its first `;`). Build roots and caches are the user's defaults, as a
user would run it; a tree that was scanned before starts warm, so `--work` a new folder and a
fresh cache (`XDG_CACHE_HOME`) give cold numbers.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _scan(tree: Path, platform: str, out: Path) -> float:
    start = time.perf_counter()
    with out.open("w", encoding="utf-8") as fh:
        subprocess.run([sys.executable, "-m", "flashbuild", "scan", str(tree), "--platform",
                        platform, "--arch", "sm120", "--json"], stdout=fh,
                       stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def _source(truth: str) -> str:
    """The report's `truth` cut to what decided what is compiled: the build's model, or the
    static reading with the start of the reason introspection fell back."""
    head = truth.split(";", maxsplit=1)[0]
    if "fell back: " not in head:
        return head
    reason = truth.split("fell back: ", 1)[1]
    if reason.startswith("introspection configures for this machine"):
        return "static reading (another platform: introspection runs for this machine's)"
    reason = reason.split(" (", 1)[0].split(":", 1)[0].strip()
    return f"static reading (introspection fell back: {reason})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    key = json.loads((args.corpus / "expected.json").read_text(encoding="utf-8"))
    work = args.work or Path(tempfile.mkdtemp(prefix="fb-corpus-"))
    work.mkdir(parents=True, exist_ok=True)
    print("| tree | target | recall | errors (max) | verdict | first scan | re-scan | "
          "what is compiled, from |")
    print("|---|---|---|---|---|---|---|---|")
    failed = 0
    for name, entry in key.items():
        tree = work / name
        if not tree.is_dir():
            with tarfile.open(args.corpus / f"{name}.tar.gz") as tar:
                tar.extractall(work, filter="data")
        for target in entry["targets"]:
            platform = target.split("/")[0]
            report = work / f"{name}-{platform}.json"
            first = _scan(tree, platform, report)
            again = _scan(tree, platform, work / f"{name}-{platform}-again.json")
            score = subprocess.run([sys.executable, str(args.corpus / "score.py"),
                                    str(args.corpus / "expected.json"), name, target,
                                    str(report)], capture_output=True, text=True, check=False)
            recall = re.search(r"recall: (\S+)", score.stdout)
            errors = re.search(r"errors: (\d+) \(max_errors (\d+)\)", score.stdout)
            truth = json.loads(report.read_text(encoding="utf-8")).get("truth", "")
            verdict = "PASS" if score.returncode == 0 else "FAIL"
            failed += score.returncode != 0
            print(f"| {name} | {target} | {recall[1] if recall else '?'} | "
                  f"{f'{errors[1]} ({errors[2]})' if errors else '?'} | {verdict} | "
                  f"{first:.1f} s | {again:.1f} s | {_source(truth)} |")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
