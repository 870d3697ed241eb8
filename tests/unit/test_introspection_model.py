"""The tree model's readers on recorded replies: the CMake File API loader, setup.py records,
and what recipe init does with a model (draft_check)."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path
from typing import Literal

import pytest
from packaging.version import Version

from flashbuild.arch import parse_arch_spec
from flashbuild.detect.cuda import Toolkit
from flashbuild.pipeline.choose import blocks, parse_todos
from flashbuild.recipes.load import parse_recipe
from flashbuild.scanning.draft import BuildDraft, BuildTodo, Draft, DraftArtifact, render
from flashbuild.scanning.draft_check import apply_model, reconcile
from flashbuild.scanning.findings import make_target
from flashbuild.source import cmake_fileapi, setup_record, treemodel
from flashbuild.source.treemodel import (
    ArchVariable,
    Bindings,
    BuildTarget,
    SourceUnit,
    TreeModel,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "introspect"
#: The tree the recorded reply was configured from (a path inside the JSON, never touched).
RECORDED_TREE = Path("/tmp/18b/cav")


def test_write_queries_makes_the_stateless_query_files(tmp_path: Path) -> None:
    cmake_fileapi.write_queries(tmp_path)
    query = tmp_path / ".cmake" / "api" / "v1" / "query"
    assert sorted(p.name for p in query.iterdir()) == ["cache-v2", "codemodel-v2",
                                                       "toolchains-v1"]


def test_load_reply_reads_targets_groups_and_cache() -> None:
    reply = cmake_fileapi.load_reply(FIXTURES / "fileapi_reply")
    assert [t.name for t in reply.targets] == ["archmod"]  # only80 is not in this config
    target = reply.targets[0]
    assert target.type == "MODULE_LIBRARY"
    # FindPython's add_library is inside pybind11_add_module: the origin is the project's call.
    assert target.defined_at is not None
    assert (target.defined_at.file, target.defined_at.command) == ("CMakeLists.txt",
                                                                   "pybind11_add_module")
    langs = {g.language: g for g in target.groups}
    assert set(langs) == {"CUDA", "CXX"}
    assert langs["CUDA"].sources == ("src/kernel.cu",)
    arch = [f for f in langs["CUDA"].fragments if "gencode" in f.value]
    assert arch and arch[0].origin is not None
    assert arch[0].origin.command == "target_compile_options"
    assert reply.cache_value("MY_ARCH") == "90a"


def test_a_configure_that_failed_at_generate_is_said_so() -> None:
    with pytest.raises(cmake_fileapi.FileApiError, match="no build system was generated"):
        cmake_fileapi.load_reply(FIXTURES / "fileapi_error")


def test_no_reply_at_all_names_the_folder(tmp_path: Path) -> None:
    with pytest.raises(cmake_fileapi.FileApiError, match="no File API reply"):
        cmake_fileapi.load_reply(tmp_path)


def test_model_from_cmake_has_kinds_sources_and_arch_flags() -> None:
    reply = cmake_fileapi.load_reply(FIXTURES / "fileapi_reply")
    model = treemodel.from_cmake(reply, RECORDED_TREE,
                                 python_suffix=".cpython-311-x86_64-linux-gnu.so")
    (target,) = model.targets
    assert target.kind == "module" and target.artifact.startswith("archmod.")
    unit = model.unit("src/kernel.cu")
    assert unit is not None and unit.language == "CUDA"
    assert unit.arch_flags == ("-gencode=arch=compute_90a,code=sm_90a",)
    assert "target_compile_options" in unit.origin
    assert model.compiled() == {"src/kernel.cu", "src/bindings.cpp"}
    assert ("MY_ARCH", "90a") in model.cache


def test_cmake_arch_candidates_are_the_variables_gencode_is_built_from() -> None:
    text = (FIXTURES / "cmake_archvar" / "CMakeLists.txt").read_text(encoding="utf-8")
    assert treemodel.cmake_arch_candidates({"CMakeLists.txt": text})[0] == "MY_ARCH"


def test_a_list_operation_that_writes_the_arch_list_names_its_input() -> None:
    text = (FIXTURES / "cmake_capslist" / "CMakeLists.txt").read_text(encoding="utf-8")
    assert treemodel.cmake_arch_candidates({"CMakeLists.txt": text}) == ["KERNEL_CAPS"]


def test_registered_names_keep_only_the_bindings_own_lines() -> None:
    pre = ('# 1 "src/bindings.cpp"\n# 1 "/usr/include/pybind11/pybind11.h" 1\n'
           'void f() { m.def("from_a_header", g); }\n# 5 "src/bindings.cpp" 2\n'
           'static void pybind11_init_archmod(::pybind11::module_ & (m)) {\n'
           '  m.def("scale", &scale);\n  m .def( "twice", &t);\n  m.def("scale", &scale);\n}\n')
    assert treemodel.registered_names(pre, "bindings.cpp", "m") == ("scale", "twice")


def test_torch_library_operators_are_no_module_attributes() -> None:
    """detectron2's vision.cpp (GPU machine, 2026-11-29): `TORCH_LIBRARY(detectron2, m)` with
    the same var as its PYBIND11_MODULE registered `nms_rotated` & co. as `torch.ops`
    operators; drafted as `_C.nms_rotated`, they failed a correct build's verify."""
    pre = ('# 1 "vision.cpp"\n'
           'static void pybind11_init__C(::pybind11::module_ & (m)) {\n'
           '  m.def("deform_conv_forward", &f);\n}\n'
           'static void TORCH_LIBRARY_init_detectron2(torch::Library&);\n'
           'void TORCH_LIBRARY_init_detectron2(torch::Library& m) {\n'
           '  m.def("nms_rotated", &nms_rotated);\n  { m.def("box_iou_rotated", &b); }\n}\n'
           'void TORCH_LIBRARY_FRAGMENT_init_detectron2_3(torch::Library & m) {\n'
           '  m.def("more", &g);\n}\n'
           'static void other(pybind11::module_ & m) { m.def("after", &h); }\n')
    assert treemodel.registered_names(pre, "vision.cpp", "m") == ("deform_conv_forward",
                                                                   "after")


def test_a_brace_in_a_torch_library_string_does_not_hide_later_exports() -> None:
    # A schema or message with `{` or `}` in it: the body ends at its own brace, not at one
    # inside a literal (before, the `{` in the schema kept the body open to the file's end).
    pre = ('# 1 "ops.cpp"\n'
           'void TORCH_LIBRARY_init_ops(torch::Library& m) {\n'
           '  m.def("pad(Tensor x, int[] p={0}) -> Tensor");\n'
           '  m.def("tag", [] { return \'{\'; });\n'
           '  m.def("open(str s=\\"{\\") -> str");\n}\n'
           'static void pybind11_init__C(::pybind11::module_ & (m)) {\n'
           '  m.def("launch", &launch);\n}\n')
    assert treemodel.registered_names(pre, "ops.cpp", "m") == ("launch",)


# --- setup.py records ---------------------------------------------------------------------

RECORD = {
    "stopped": True,
    "extensions": [{"name": "envpkg._cuda", "sources": ["csrc/bindings.cpp", "csrc/kernel.cu"],
                    "include_dirs": ["csrc/include"], "cuda": True}],
    "compdb": [
        {"directory": "/scratch/temp", "file": "/scratch/tree/csrc/kernel.cu",
         "command": "/cuda/bin/nvcc -I/scratch/tree/csrc/include -I/torch/include -c "
                    "-c /scratch/tree/csrc/kernel.cu -o /scratch/temp/kernel.o -DENVPKG_FAST "
                    "-O2 -gencode=arch=compute_90a,code=sm_90a -std=c++17"},
        {"directory": "/scratch/temp", "file": "/scratch/tree/csrc/bindings.cpp",
         "command": "c++ -I /scratch/tree/csrc/include -c /scratch/tree/csrc/bindings.cpp "
                    "-o /scratch/temp/bindings.o -O2 -DTORCH_EXTENSION_NAME=_cuda"},
    ],
    "env_reads": [{"name": "PROJECT_CUDA_EXT", "where": "setup.py:8"}],
    "network": [],
    "rewrites": [{"removed": ["-gencode", "arch=compute_80,code=sm_80"]}],
    "exception": None,
}


def test_record_splits_each_compile_command() -> None:
    record = setup_record.parse_record(RECORD)
    assert record.stopped and record.exception is None
    by = {c.source.rsplit("/", 1)[-1]: c for c in record.commands}
    cu = by["kernel.cu"]
    assert cu.language == "CUDA"
    assert cu.includes == ("/scratch/tree/csrc/include", "/torch/include")
    assert cu.defines == ("ENVPKG_FAST",)
    assert cu.arch_flags == ("-gencode=arch=compute_90a,code=sm_90a",)
    assert "-O2" in cu.flags and "-c" not in cu.flags and "/scratch/temp/kernel.o" not in cu.flags
    assert by["bindings.cpp"].includes == ("/scratch/tree/csrc/include",)
    assert record.env_names() == ("PROJECT_CUDA_EXT",)
    assert record.replaced_arch_flags == ("-gencode", "arch=compute_80,code=sm_80")


def test_model_from_record_maps_the_copy_back_to_the_tree(tmp_path: Path) -> None:
    record = setup_record.parse_record(RECORD)
    model = treemodel.from_record(record, tmp_path / "tree", Path("/scratch/tree"))
    (ext,) = model.targets
    assert ext.name == "envpkg._cuda" and ext.kind == "module"
    unit = model.unit("csrc/kernel.cu")
    assert unit is not None and unit.includes[0] == "csrc/include"
    assert unit.origin.startswith("torch's build.ninja")
    assert "arch=compute_80,code=sm_80" in model.notes[0]


def test_a_raised_exception_is_recorded_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    path.write_text('{"stopped": false, "exception": {"type": "RuntimeError", "message": '
                    '"unsupported arch 12.0", "where": "setup.py:10"}}', encoding="utf-8")
    record = setup_record.load_record(path)
    assert str(record.exception) == "RuntimeError: unsupported arch 12.0 (setup.py:10)"
    with pytest.raises(setup_record.RecordError):
        setup_record.load_record(tmp_path / "missing.json")


# --- recipe init with a model ---------------------------------------------------------------

def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text('"""pkg"""\n', encoding="utf-8")
    (root / "pkg" / "use.py").write_text("from pkg import kern\n", encoding="utf-8")
    return root


def _unit(path: str) -> SourceUnit:
    return SourceUnit(path=path, language="CUDA", includes=(), defines=(), flags=(),
                      arch_flags=("-gencode=arch=compute_90a,code=sm_90a",),
                      origin="CMakeLists.txt:9 (target_compile_options)")


def _draft_with_static_guesses() -> Draft:
    d = Draft(name="t", source_path="tree", target=make_target("linux", "sm_90a"))
    d.build = BuildDraft(cmake_source=".", notes=defaultdict(list))
    d.build.artifacts = [
        DraftArtifact(name="kern", kind="module", target="kern", where="CMakeLists.txt:5"),
        DraftArtifact(name="kern_fa2", kind="module", target="kern_fa2",
                      where="CMakeLists.txt:20")]
    d.build.exports = ["from_text_only"]
    d.build.todos.append(BuildTodo(table="install", what="no package imports kern",
                                   evidence="", fix=""))
    return d


def test_apply_model_keeps_only_configured_targets_and_sets_the_arch_variable(
        tmp_path: Path) -> None:
    root = _tree(tmp_path)
    d = _draft_with_static_guesses()
    model = TreeModel(
        system="cmake", via="CMake File API (codemodel-v2, cache-v2)",
        targets=(BuildTarget(name="kern", kind="module",
                             artifact="kern.cpython-311-x86_64-linux-gnu.so",
                             sources=(_unit("k.cu"),), defined_at="CMakeLists.txt:5 (x)"),),
        arch_variable=ArchVariable(name="GPU_ARCH", form="arch_numbers", value="90",
                                   evidence="-gencode=arch=compute_90a,code=sm_90a"),
        bindings=(Bindings(module="kern", source="b.cpp", names=("scale",)),))
    apply_model(d, model, root, ["pkg/__init__.py", "pkg/use.py"])
    text = render(d)
    recipe = parse_recipe(text, None)
    assert recipe.build.targets == ("kern",)
    assert "kern_fa2 (CMakeLists.txt:20)" in text  # said, not drafted
    assert recipe.build.options[0].define == {"GPU_ARCH": "{arch_numbers}"}
    assert recipe.install is not None and recipe.install.package == "pkg"
    assert recipe.verify.exports == ("kern.scale",)  # pkg/__init__.py does not bind it
    assert "from_text_only" not in text
    assert "TODO: [install]" not in text


def test_exports_are_left_out_with_a_todo_when_the_bindings_do_not_preprocess(
        tmp_path: Path) -> None:
    d = _draft_with_static_guesses()
    model = TreeModel(
        system="cmake", via="CMake File API", targets=(
            BuildTarget(name="kern", kind="module", artifact="kern.so", sources=(),
                        defined_at="CMakeLists.txt:5"),),
        bindings=(Bindings(module="kern", source="b.cpp", names=(),
                           error="context.h:3: fatal error: cublas_v2.h: No such file"),))
    apply_model(d, model, _tree(tmp_path), [])
    text = render(d)
    assert parse_recipe(text, None).verify.exports == ()
    assert "\n[verify]" not in text
    assert "cublas_v2.h" in text and "exports not drafted" in text


def test_a_setup_py_that_raised_gets_a_todo_quoting_it(tmp_path: Path) -> None:
    d = Draft(name="t", source_path="tree", target=make_target("linux", "sm_120"))
    d.build = BuildDraft(backend="setuptools", notes=defaultdict(list))
    exc = setup_record.RaisedError(type="RuntimeError", message="unsupported arch 12.0",
                                   where="setup.py:10")
    model = TreeModel(system="setuptools", via="setup.py record mode", targets=(),
                      exception=exc)
    apply_model(d, model, _tree(tmp_path), [])
    text = render(d)
    assert "RuntimeError: unsupported arch 12.0 (setup.py:10)" in text


# --- drafts that agree with themselves (issue 21 item 6) -----------------------------------

def _finding(rule: str, path: str = "setup.py", fix: object = None) -> object:
    from flashbuild.scanning.findings import Finding, Fix, Severity
    from flashbuild.scanning.rules import RULES

    return Finding(rule=rule, category=RULES[rule].category, severity=Severity.ERROR,
                   path=path, line=1, col=1, message="m", evidence="e", snippet="s",
                   fix=fix or Fix(manual="d"))


def test_no_todo_for_what_the_drafted_environment_already_sets() -> None:
    d = Draft(name="t", source_path="tree", target=make_target("windows", "sm_120"))
    d.build = BuildDraft(backend="setuptools", notes=defaultdict(list))
    d.build.env.append(({"platform": ["windows"]},
                        {"NVCC_APPEND_FLAGS": "-Xcompiler /Zc:preprocessor -DUSE_CUDA"}, "c"))
    d.build.env.append(({"platform": ["windows"]}, {"PKG_FORCE_BUILD": "TRUE"}, "c"))
    d.build.todos.append(BuildTodo(table="build", what="the gencode list in setup.py is "
                                   "hard-coded: TORCH_CUDA_ARCH_LIST cannot choose the target",
                                   evidence="scan FB220", fix="narrow the list in setup.py"))
    from flashbuild.scanning.findings import Fix
    from flashbuild.scanning.proposals import ChooseArchList, ForceBuild, NvccAppendFlag

    # What each check's fix asks of the build environment (checks_setup.py).
    env = {"FB200": NvccAppendFlag(flag="-Xcompiler /Zc:preprocessor"),
           "FB210": NvccAppendFlag(flag="-DUSE_CUDA"), "FB230": ForceBuild(),
           "FB220": ChooseArchList(), "FB202": None}
    d.todos = [_finding(r, fix=Fix(manual="d", env=e))  # type: ignore[misc]
               for r, e in env.items()]
    reconcile(d)
    assert [f.rule for f in d.todos] == ["FB202"]
    assert {f.rule for f, _why in d.handled} == {"FB200", "FB210", "FB230", "FB220"}
    text = render(d)
    assert "narrow the list in setup.py" not in text
    assert "TODO: FB200" not in text and "TODO: FB230" not in text


def test_a_note_never_names_a_step_the_draft_lacks() -> None:
    from flashbuild.scanning.draft import draft_recipe
    from flashbuild.scanning.findings import Fix, ScanResult
    from flashbuild.scanning.proposals import GuardInstantiation

    kept = Fix(manual="d", step=GuardInstantiation(file="a.cu", site="kept"))
    result = ScanResult(root=Path("/nonexistent"), target=make_target("linux", "sm_90a"),
                        findings=(_finding("FB142", "a.cu", kept),),  # type: ignore[arg-type]
                        skipped=(), files_scanned=1, seconds=0.0)
    d = draft_recipe(result, name="t", source_path="tree")
    assert not any(s.transform == "explicit-instantiations" for s in d.steps)
    assert [why for _f, why in d.handled] == [
        "kept: no step of this draft edits explicit instantiations"]


def test_missing_toolkit_components_are_read_from_cmakes_generate_error() -> None:
    from flashbuild.building import cmake

    output = ('CMake Error at CMakeLists.txt:432 (target_link_libraries):\n'
              '  Target "flash_vla_kernels" links to:\n\n    CUDA::cublas\n\n'
              '  but the target was not found.  Possible reasons include:\n'
              'CMake Error at CMakeLists.txt:432 (target_link_libraries):\n'
              '  Target "x" links to:\n\n    CUDA::cublasLt\n\n  but the target was not found.\n'
              '  Target "y" links to:\n\n    MyLib::core\n\n  but the target was not found.\n')
    assert cmake.missing_toolkit_components(output) == ["CUDA::cublas", "CUDA::cublasLt"]
    home = Path("/venv/lib/python3.11/site-packages/nvidia/cu13")
    standard = _toolkit(Path("/opt/cuda"), "standard")
    fix = cmake.component_fix(["CUDA::cublas", "CUDA::cublasLt"], standard, "13.0.*",
                              pypi_home=home, python="/venv/bin/python")
    assert fix == ("install cublas into the toolkit at /opt/cuda, or use a PyPI toolkit that "
                   "has it: `/venv/bin/python -m pip install \"cuda-toolkit[nvcc,cudart,cccl,"
                   "crt,nvvm,cublas]==13.0.*\"`, then build with `--cuda "
                   "/venv/lib/python3.11/site-packages/nvidia/cu13`")
    assert "pip" not in cmake.component_fix(["CUDA::mystery"], standard, "13.0.*",
                                            pypi_home=home, python="python")


def _toolkit(root: Path, layout: Literal["standard", "pypi"]) -> Toolkit:
    return Toolkit(root=root, nvcc=root / "bin" / "nvcc", version=Version("13.0.88"),
                   version_source="nvcc", codes=(), layout=layout, dll_dirs=(),
                   has_headers=True, host_config=None, origins=("PATH",))


def test_the_cublas_fix_names_this_pythons_toolkit_folder_never_a_placeholder() -> None:
    """FlashRT links cuBLAS: the fix names the folder pip installs into, literally."""
    from flashbuild.building import cmake

    home = Path("/venv/lib/python3.11/site-packages/nvidia/cu13")
    in_use = cmake.component_fix(["CUDA::cublas"], _toolkit(home, "pypi"), "13.0.*",
                                 pypi_home=home, python="/venv/bin/python")
    # The build already uses this Python's toolkit: the extra goes into it, no --cuda.
    assert in_use == (f"add cublas to the PyPI toolkit at {home}: `/venv/bin/python -m pip "
                      "install \"cuda-toolkit[nvcc,cudart,cccl,crt,nvvm,cublas]==13.0.*\"`")
    for fix in (in_use, cmake.component_fix(["CUDA::cublasLt"], _toolkit(Path("/opt/c"),
                                            "standard"), "13.0.*", pypi_home=home,
                                            python="python")):
        assert "<" not in fix and "site-packages>" not in fix


def test_find_jit_names_run_time_compilation_with_its_arch_flags(tmp_path: Path) -> None:
    (tmp_path / "jit").mkdir()
    (tmp_path / "jit" / "build.py").write_text(
        "from torch.utils.cpp_extension import load\n"
        "mod = load(name='k', sources=['k.cu'],\n"
        "           extra_cuda_cflags=['-gencode=arch=compute_90a,code=sm_90a'])\n",
        encoding="utf-8")
    (tmp_path / "jit" / "raw.py").write_text(
        "import json, subprocess\ncfg = json.load(open('c.json'))\n"
        "subprocess.run(['nvcc', '-arch=sm_80', '-cubin', 'k.cu'], check=True)\n",
        encoding="utf-8")
    sites = treemodel.find_jit(tmp_path, ["jit/build.py", "jit/raw.py"])
    assert [(s.where, s.how) for s in sites] == [
        ("jit/build.py:2", "torch.utils.cpp_extension.load"), ("jit/raw.py:3", "nvcc")]
    assert sites[0].arch_flags == ("-gencode=arch=compute_90a,code=sm_90a",)
    assert "-arch=sm_80" in sites[1].arch_flags


def test_nvcc_reached_through_a_helper_and_a_named_argv_is_a_run_time_compile(
        tmp_path: Path) -> None:
    """DeepGEMM's JIT: `command = [get_nvcc_compiler()[0], code_path, ...]` then
    `subprocess.check_call(command)`; a pycuda SourceModule too. A name assigned something
    else, and a command that only asks nvcc, are not."""
    (tmp_path / "compiler.py").write_text(
        "import os, subprocess\n"
        "def get_nvcc_compiler():\n    return (os.environ['CUDA_HOME'] + '/bin/nvcc', '12.8')\n"
        "def build(code_path, so_path):\n"
        "    flags = ['-std=c++17', '-gencode=arch=compute_90a,code=sm_90a']\n"
        "    command = [get_nvcc_compiler()[0], code_path, *flags, '-o', so_path]\n"
        "    return subprocess.check_call(command)\n"
        "def other():\n    command = 'ls'\n    subprocess.check_call(command)\n"
        "def version():\n"
        "    command = [get_nvcc_compiler()[0], '--version']\n"
        "    return subprocess.check_output(command)\n", encoding="utf-8")
    (tmp_path / "legacy.py").write_text(
        "from pycuda.compiler import SourceModule\nmod = SourceModule('__global__ void k(){}')\n",
        encoding="utf-8")
    sites = treemodel.find_jit(tmp_path, ["compiler.py", "legacy.py"])
    assert [(s.where, s.how) for s in sites] == [("compiler.py:7", "nvcc"),
                                                 ("legacy.py:2", "pycuda SourceModule")]


def test_asking_nvcc_its_version_is_no_run_time_compile(tmp_path: Path) -> None:
    (tmp_path / "bench.py").write_text(
        "import subprocess\nout = subprocess.check_output(['nvcc', '--version']).decode()\n",
        encoding="utf-8")
    assert treemodel.find_jit(tmp_path, ["bench.py"]) == ()


def _setuptools_draft() -> Draft:
    d = Draft(name="t", source_path="tree", target=make_target("linux", "sm_120"))
    d.build = BuildDraft(backend="setuptools", notes=defaultdict(list))
    d.build.env.append(({"platform": ["linux"]}, {"MYPROJ_CUDA_ARCHS": "{arch_numbers}"},
                        "REVIEW: setup.py builds its gencode list from MYPROJ_CUDA_ARCHS"))
    return d


def _fake_introspect(raises_without_env: bool):  # type: ignore[no-untyped-def]
    from flashbuild.source.treemodel import Introspection

    exc = setup_record.RaisedError(type="ValueError", message="MYPROJ_CUDA_ARCHS: 120 is "
                                   "not supported", where="setup.py:11")

    def run(recipe, root, spec, platform):  # type: ignore[no-untyped-def]
        raised = bool(recipe.build.env) or raises_without_env
        return Introspection(model=TreeModel(system="setuptools", via="setup.py record mode",
                                             targets=(), exception=exc if raised else None))
    return run


@pytest.mark.parametrize("raises_without_env", [False, True])
def test_a_drafted_environment_the_setup_py_rejects_is_left_out(
        tmp_path: Path, raises_without_env: bool) -> None:
    from flashbuild.scanning.draft import _introspect

    d = _setuptools_draft()
    _introspect(d, _tree(tmp_path), parse_arch_spec("sm_120"), "linux",
                _fake_introspect(raises_without_env))
    assert d.build is not None and d.build.env == []
    text = render(d)
    assert "ValueError: MYPROJ_CUDA_ARCHS: 120 is not supported (setup.py:11)" in text
    if raises_without_env:
        assert "with or without the drafted environment" in text
    else:
        assert "raises with the drafted environment (MYPROJ_CUDA_ARCHS={arch_numbers})" in text
    assert text.count("MYPROJ_CUDA_ARCHS: 120 is not supported") == 1  # one TODO, not two


def test_a_setup_py_that_cannot_read_the_suffixed_arch_list_is_recorded_with_the_plain_one(
        tmp_path: Path) -> None:
    """The shape of deepspeed 0.19.8's op builders before any switch
    (tests/integration/test_introspect.py runs the switch case, fixture setup_archparse, with
    real record mode): `int()` on the minor part of `9.0a` raises, `9.0` runs. The drafted arch
    list becomes `{arch_dotted}` with the exception as its reason; nothing else changes."""
    from flashbuild.scanning.draft import _introspect
    from flashbuild.source.treemodel import Introspection

    seen: list[str] = []

    def run(recipe, root, spec, platform):  # type: ignore[no-untyped-def]
        value = next((t.set["TORCH_CUDA_ARCH_LIST"] for t in recipe.build.env
                      if "TORCH_CUDA_ARCH_LIST" in t.set), "")
        seen.append(value)
        raised = setup_record.RaisedError(
            type="ValueError", message="invalid literal for int() with base 10: '0a'",
            where="setup.py:14") if value != "{arch_dotted}" else None
        return Introspection(model=TreeModel(system="setuptools", via="setup.py record mode",
                                             targets=(), exception=raised))

    d = Draft(name="t", source_path="tree", target=make_target("linux", "sm_90a"))
    d.build = BuildDraft(backend="setuptools", notes=defaultdict(list))
    d.build.env.append(({"platform": ["windows", "linux"]},
                        {"TORCH_CUDA_ARCH_LIST": "{torch_arch_list}"}, "reads the arch list"))
    _introspect(d, _tree(tmp_path), parse_arch_spec("sm_90a"), "linux", run)
    assert seen[:2] == ["{torch_arch_list}", "{arch_dotted}"]
    assert [values for _w, values, _c in d.build.env] == [
        {"TORCH_CUDA_ARCH_LIST": "{arch_dotted}"}]
    text = render(d)
    assert "refuses 9.0a (ValueError at setup.py:14: invalid literal for int() with base 10: " \
        "'0a'); with 9.0 it runs" in text
    assert "setup.py raises" not in text
    # A plain target's exception quotes no suffix: no second spelling is tried.
    seen.clear()
    plain = Draft(name="t", source_path="tree", target=make_target("linux", "sm_90"))
    plain.build = BuildDraft(backend="setuptools", notes=defaultdict(list))
    fake = _fake_introspect(raises_without_env=True)
    asked: list[dict[str, str]] = []

    def counted(recipe, root, spec, platform):  # type: ignore[no-untyped-def]
        asked.extend(dict(t.set) for t in recipe.build.env)
        return fake(recipe, root, spec, platform)

    _introspect(plain, _tree(tmp_path / "p"), parse_arch_spec("sm_90"), "linux", counted)
    assert not [a for a in asked if "TORCH_CUDA_ARCH_LIST" in a]
    assert all("TORCH_CUDA_ARCH_LIST" not in v for _w, v, _c in plain.build.env)


def test_ninja_arch_flags_include_what_cuda_architectures_adds() -> None:
    ninja = (
        "build CMakeFiles/_C.dir/kernels/norm.cu.o: CUDA_COMPILER___C_unscanned_Release "
        "/t/csrc/kernels/norm.cu || cmake_object_order_depends_target__C\n"
        "  DEFINES = -D_C_EXPORTS\n"
        '  FLAGS = -O3 -std=c++17 "--generate-code=arch=compute_90a,code=[sm_90a]" -lineinfo\n'
        "\n"
        "build CMakeFiles/_C.dir/bindings.cpp.o: CXX_COMPILER___C_unscanned_Release "
        "/t/csrc/bindings.cpp\n  FLAGS = -O3 -fPIC\n")
    assert treemodel.ninja_arch_flags(ninja) == {
        "/t/csrc/kernels/norm.cu": ("--generate-code=arch=compute_90a,code=[sm_90a]",)}


def test_a_setup_py_that_builds_nothing_in_a_jit_tree_says_so_first(tmp_path: Path) -> None:
    """deepspeed 0.19.8: as run, setup.py builds no extension (DS_BUILD_OPS defaults to 0) and
    the op builders call cpp_extension.load. The first TODO says why there is no module,
    naming the switches setup.py read, before the [install] TODO that follows from it; both
    block a build that installs."""
    d = Draft(name="t", source_path="tree", target=make_target("linux", "sm_90a"))
    d.build = BuildDraft(backend="setuptools", notes=defaultdict(list), todos=[BuildTodo(
        table="install", what="no package for the extension modules of setup.py",
        evidence="modules: none named", fix="add [install] package")])
    model = TreeModel(
        system="setuptools", via="setup.py record mode", targets=(),
        env_reads=(setup_record.EnvRead(name="DS_ACCELERATOR", where="deepspeed/a.py:59"),
                   setup_record.EnvRead(name="DS_ENABLE_NINJA", where="setup.py:67"),
                   setup_record.EnvRead(name="DS_BUILD_OPS", where="setup.py:76"),
                   setup_record.EnvRead(name="DS_BUILD_AIO", where="setup.py:76")),
        jit=(treemodel.JitSite(where="op_builder/builder.py:102",
                               how="torch.utils.cpp_extension.load"),))
    apply_model(d, model, _tree(tmp_path), [])
    first, second = parse_todos(render(d))
    assert first.table == "build" and "compiles its" in first.what, first
    assert "cpp_extension.load at op_builder/builder.py:102" in first.evidence
    assert "(its setup.py reads DS_BUILD_OPS, DS_BUILD_AIO; e.g. the recipe lines "\
        "[[build.env]] set = { DS_BUILD_OPS = \"1\" }" in first.fix
    assert second.table == "install"
    recipe = parse_recipe(render(d), None)
    assert [blocks(t, recipe, installing=True) for t in (first, second)] == [True, True]


def test_a_top_level_module_a_package_imports_by_name_installs_beside_it(
        tmp_path: Path) -> None:
    """torchmcubes 0.1.0: CMake installs `torchmcubes_module` at the top of site-packages
    (`install(TARGETS … DESTINATION .)`) and torchmcubes/__init__.py runs `import
    torchmcubes_module as mc`: the package gets the shim and the manifest, the module is
    top_level (before: an [install] TODO that stopped the build)."""
    root = tmp_path / "tree"
    (root / "mc").mkdir(parents=True)
    (root / "mc" / "__init__.py").write_text("import torch\nimport mcmod as _m\n",
                                             encoding="utf-8")
    d = Draft(name="t", source_path="tree", target=make_target("linux", "sm_90a"))
    d.build = BuildDraft(backend="skbuild", notes=defaultdict(list), todos=[BuildTodo(
        table="install", what="no CMake module target, and no package imports an extension "
        "module", evidence="searched every __init__.py of the tree", fix="add [install]")])
    model = TreeModel(
        system="skbuild", via="CMake File API", targets=(
            BuildTarget(name="mcmod", kind="module", artifact="mcmod.so",
                        sources=(_unit("mc.cu"),), defined_at="cxx/CMakeLists.txt:2"),))
    apply_model(d, model, root, ["mc/__init__.py"])
    recipe = parse_recipe(render(d), None)
    assert recipe.install is not None
    assert (recipe.install.package, recipe.install.top_level) == ("mc", ("mcmod",))
    assert "mc/__init__.py imports it by that name" in render(d)


def test_the_second_scan_adds_findings_only_in_files_the_first_did_not_read() -> None:
    """recipe init scans again with the configured build's model for the sources the first
    scan did not read (a glob's). That scan reads the whole tree: with the build's defines it
    can report, in a file the first scan already judged, a site at another line (another
    branch live). The first scan's word on its files stands; only the unread files' findings
    join the draft."""
    from flashbuild.scanning.draft import _merge_findings
    from flashbuild.scanning.findings import Finding, ScanResult

    first: Finding = _finding("FB124", "a.cu")  # type: ignore[assignment]
    d = Draft(name="t", source_path="tree", target=make_target("linux", "sm_90a"))
    d.todos = [first]
    again = dataclasses.replace(first, line=9)  # the read file, another line
    glob = dataclasses.replace(first, path="glob/b.cu")  # a source only the build names
    result = ScanResult(root=Path("/nonexistent"), target=d.target,
                        findings=(first, again, glob), skipped=(), files_scanned=2,
                        seconds=0.0, read=frozenset({"a.cu", "glob/b.cu"}))
    _merge_findings(d, result, ["glob/b.cu"], read=frozenset({"a.cu"}))
    assert [(f.path, f.line) for f in d.todos] == [("a.cu", 1), ("glob/b.cu", 1)]


def test_extensions_in_several_subpackages_install_into_the_package_that_holds_them() -> None:
    """OpenPCDet's setup.py (a helper names each `pcdet.ops.X.X_cuda`): the record's seven
    extensions live in five subpackages of `pcdet.ops`; [install] was the first one's
    `pcdet.ops.iou3d_nms`, whose folder holds one of them."""
    from flashbuild.scanning.draft_check import _install_from_record

    names = ["pcdet.ops.iou3d_nms.iou3d_nms_cuda", "pcdet.ops.roiaware_pool3d.roiaware_cuda",
             "pcdet.ops.pointnet2.pointnet2_stack.pointnet2_stack_cuda"]
    built = [BuildTarget(name=n, kind="module", artifact="", sources=(), defined_at=n)
             for n in names]
    files = ["pcdet/__init__.py", "pcdet/ops/__init__.py", "pcdet/ops/iou3d_nms/__init__.py",
             "pcdet/ops/roiaware_pool3d/__init__.py", "pcdet/ops/pointnet2/__init__.py"]
    b = BuildDraft(backend="setuptools", notes=defaultdict(list))
    _install_from_record(b, built, files)
    assert (b.package, b.package_dir) == ("pcdet.ops", "pcdet/ops")
    one = BuildDraft(backend="setuptools", notes=defaultdict(list))
    _install_from_record(one, built[:1], files)
    assert (one.package, one.package_dir) == ("pcdet.ops.iou3d_nms", "pcdet/ops/iou3d_nms")
