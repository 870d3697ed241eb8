"""Switching arch and back reinstalls: `build --arch sm120`, `--arch sm_100`, `--arch sm120`
leaves the sm120 build installed (issue 19, item 4).

Each build folder (one per arch) keeps its own install stamp, and both install the same paths.
Before the fix the third build found its own stamp current and the files present, said
"nothing to compile", exit 0, and left the sm_100 binary installed; `verify`'s fix for that
(`flashbuild build --arch sm_120`) was the same command again. Each arch compiles once (module
fixture); the third build compiles nothing and must reinstall.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flashbuild.verifying.fatbin import list_images

pytestmark = [pytest.mark.integration, pytest.mark.heavy]

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "build" / "minikern"
EXT = __import__("sysconfig").get_config_var("EXT_SUFFIX")


def _build(tree: Path, cuda: Path, arch: str) -> tuple[dict[str, object], float]:
    argv = [sys.executable, "-m", "flashbuild", "build", "--recipe", str(tree / "minikern.toml"),
            "--arch", arch, "--cuda", str(cuda), "--jobs", "2", "--launcher", "none",
            "--install", "inplace", "--json"]
    start = time.monotonic()
    done = subprocess.run(argv, cwd=tree.parent, capture_output=True, text=True, check=False,
                          timeout=900)
    seconds = time.monotonic() - start
    assert done.returncode == 0, done.stderr + done.stdout
    doc: dict[str, object] = json.loads(done.stdout)
    return doc, seconds


@pytest.fixture(scope="module")
def round_trip(tmp_path_factory: pytest.TempPathFactory, cuda_toolkit_root: Path
               ) -> tuple[Path, list[dict[str, object]]]:
    tree = tmp_path_factory.mktemp("roundtrip") / "minikern"
    shutil.copytree(FIXTURE, tree)
    docs = []
    for arch in ("sm120", "sm_100", "sm120"):
        doc, seconds = _build(tree, cuda_toolkit_root, arch)
        print(f"build --arch {arch}: {seconds:.1f} s, {doc['edges']} step(s)")
        docs.append(doc)
    return tree, docs


def _installed_sass(tree: Path) -> list[str]:
    module = tree / "python" / "minikern" / f"_C{EXT}"
    return sorted({i.name for i in list_images(module).sass})


def test_switching_arch_and_back_reinstalls(round_trip: tuple[Path, list[dict[str, object]]]
                                            ) -> None:
    tree, (first, second, third) = round_trip
    assert first["build_dir"] != second["build_dir"]  # one build folder per arch
    assert third["build_dir"] == first["build_dir"]
    assert third["ninja_no_work"] is True  # nothing recompiled ...
    install = third["install"]
    assert isinstance(install, dict)
    assert install["skipped"] is False  # ... but the sm120 build went back in
    assert any("held another build" in n for n in install["notes"])
    assert _installed_sass(tree) == ["sm_120"]
    manifest = json.loads((tree / "python" / "minikern" / "flashbuild-manifest.json").read_text())
    assert manifest["archs"] == ["sm_120"]


def test_verify_agrees_after_the_round_trip(round_trip: tuple[Path, list[dict[str, object]]]
                                            ) -> None:
    # verify's fix for a wrong arch is `flashbuild build --arch X`: after the round trip the
    # installed module holds sm120, so that command is not needed again.
    tree, _ = round_trip
    module = tree / "python" / "minikern" / f"_C{EXT}"
    done = subprocess.run([sys.executable, "-m", "flashbuild", "verify", str(module), "--arch",
                           "sm120", "--json"], capture_output=True, text=True, check=False,
                          timeout=300)
    doc = json.loads(done.stdout)
    assert done.returncode == 0 and doc["ok"] is True, doc
    assert "flashbuild build --arch" not in done.stdout
    wrong = subprocess.run([sys.executable, "-m", "flashbuild", "verify", str(module),
                            "--arch", "sm_100", "--json"], capture_output=True, text=True,
                           check=False, timeout=300)
    assert wrong.returncode != 0 and "flashbuild build --arch" in wrong.stdout


def test_an_unchanged_rerun_installs_nothing(round_trip: tuple[Path, list[dict[str, object]]],
                                             cuda_toolkit_root: Path) -> None:
    tree, _ = round_trip
    doc, _ = _build(tree, cuda_toolkit_root, "sm120")
    install = doc["install"]
    assert isinstance(install, dict) and install["skipped"] is True
