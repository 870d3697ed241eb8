"""Golden tests for `explicit-instantiations` on fixture files covering every shape."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from flashbuild.errors import PatchError
from flashbuild.patching.transforms import registry
from flashbuild.patching.transforms.base import TransformContext, TransformResult
from flashbuild.patching.transforms.instantiations import find_sites
from flashbuild.recipes.transforms import ExplicitInstantiationsParams
from flashbuild.source import cxx
from flashbuild.source.instantiations import FileFacts, InstantiationAnalysis, file_facts
from tests.unit.transform_tree import DictTree

BASE = Path(__file__).resolve().parent.parent / "fixtures" / "transforms" / "instantiations"
EXPECT = {"norm.cu": 12, "crlf.cu": 2}


def _tree() -> DictTree:
    return DictTree.from_dir(BASE / "input")


def _run(tree: DictTree, **kw: object) -> TransformResult:
    ctx = TransformContext(platform="windows", archs=("sm_120",), sources=tuple(tree.files))
    params = ExplicitInstantiationsParams(**{"files": ("*.cu",), "expect": EXPECT, **kw})  # type: ignore[arg-type]
    return registry()["explicit-instantiations"].apply(tree, params, ctx)


@pytest.mark.parametrize("mode", ["guard", "remove"])
def test_golden_output(mode: str) -> None:
    result = _run(_tree(), mode=mode)
    golden = {p.name: p.read_bytes().decode() for p in (BASE / mode).iterdir()}
    assert result.changes == golden


def test_sites_are_classified() -> None:
    sites = {(s.path, s.line): (s.kind, s.action) for s in _run(_tree()).sites}
    assert sites[("norm.cu", 9)] == ("kernel-instantiation", "edit")
    assert sites[("norm.cu", 16)] == ("kernel-instantiation", "edit")  # multi-line
    assert sites[("norm.cu", 25)] == ("kernel-instantiation", "edit")  # in #else
    assert sites[("norm.cu", 30)] == ("kernel-instantiation", "edit")  # macro, no `;`
    assert sites[("norm.cu", 34)] == ("kernel-instantiation", "edit")  # macro with `;`
    assert sites[("norm.cu", 37)] == ("kernel-instantiation", "already")
    assert sites[("norm.cu", 40)] == ("kernel-instantiation", "already")
    assert sites[("norm.cu", 48)] == ("host-instantiation", "keep")
    assert sites[("norm.cu", 55)] == ("host-instantiation", "edit")


def test_host_template_referenced_elsewhere_is_kept_and_named() -> None:
    kept = [s for s in _run(_tree()).sites if s.action == "keep"]
    assert len(kept) == 1
    assert "launch_rms_norm" in kept[0].note and "use.cu:7" in kept[0].note
    changed = _run(_tree()).changes["norm.cu"]
    assert "\ntemplate void launch_rms_norm<float>(float*, const float*, int, cudaStream_t);\n"\
        "\n// A host" in changed


def test_keep_referenced_off_guards_it_too() -> None:
    changed = _run(_tree(), keep_referenced=False).changes["norm.cu"]
    assert "#if !defined(_MSC_VER)\ntemplate void launch_rms_norm<float>" in changed


def test_decoys_survive() -> None:
    source = (BASE / "input" / "norm.cu").read_text()
    decoys = source[source.index("// Decoys."):]
    for mode in ("guard", "remove"):
        assert _run(_tree(), mode=mode).changes["norm.cu"].endswith(decoys)


def test_crlf_stays_crlf() -> None:
    out = _run(_tree()).changes["crlf.cu"]
    assert out.count("\r\n") == out.count("\n")


@pytest.mark.parametrize("mode", ["guard", "remove"])
def test_idempotent(mode: str) -> None:
    tree = _tree()
    first = _run(tree, mode=mode)
    again = _run(tree.apply(first.changes), mode=mode)
    assert again.changes == {}
    assert {s.action for s in again.sites} == {"already", "keep"}
    assert len(again.sites) == len(first.sites)


def test_custom_guard_condition() -> None:
    out = _run(_tree(), guard="!defined(FB_NO_INSTANTIATIONS)").changes["crlf.cu"]
    assert "#if !defined(FB_NO_INSTANTIATIONS)\r\n" in out
    again = _run(_tree().apply({"crlf.cu": out}), guard="!defined(FB_NO_INSTANTIATIONS)")
    assert "crlf.cu" not in again.changes


def test_expected_count_mismatch_is_an_error() -> None:
    with pytest.raises(PatchError) as err:
        _run(_tree(), expect={"norm.cu": 6, "crlf.cu": 2})
    assert err.value.what == "upstream changed: expected 6 instantiation sites in norm.cu, "\
        "found 12"


def test_expected_total_mismatch_is_an_error() -> None:
    with pytest.raises(PatchError, match="expected 3 instantiation sites in 4 files, found 14"):
        _run(_tree(), expect=3)


def test_nothing_matched_is_an_error_unless_expected() -> None:
    with pytest.raises(PatchError, match="matched nothing"):
        _run(_tree(), files=("nothing.cu",), expect=None)
    assert _run(_tree(), files=("nothing.cu",), expect=0).changes == {}


def test_missing_file_is_an_error() -> None:
    with pytest.raises(PatchError, match=r"gone\.cu does not exist"):
        _run(_tree(), files=("gone.cu",))


def test_site_sharing_a_line_is_refused() -> None:
    # A host site is guarded beside a kernel site the transform guards in the same file.
    tree = DictTree({"x.cu": "template <class T> __global__ void k(T* __restrict__) {}\n"
                             "template __global__ void k<int>(int*);\n"
                             "template <class T> void f(T) {}\n"
                             "int a; template void f<int>(int);\n"})
    with pytest.raises(PatchError, match="shares its line"):
        _run(tree, files=("x.cu",), expect=2)


def test_block_comment_running_past_the_site_line_is_refused() -> None:
    # The `#endif` would land inside `/* … */`, where the preprocessor never sees it.
    tree = DictTree({"x.cu": "template <class T> __global__ void k(T* __restrict__) {}\n"
                             "template __global__ void k<int>(int*); /* int\n"
                             "   and more */\n"})
    with pytest.raises(PatchError, match="shares its line"):
        _run(tree, files=("x.cu",), expect=1)


def test_comments_ending_on_the_site_line_are_fine() -> None:
    tree = DictTree({"x.cu": "template <class T> __global__ void k(T* __restrict__) {}\n"
                             "template __global__ void k<int>(int*); /* a */ // b\n"})
    result = _run(tree, files=("x.cu",), expect=1)
    assert result.changes["x.cu"].endswith("/* a */ // b\n#endif\n")


def test_msvc_else_branch_counts_as_guarded() -> None:
    tree = DictTree({"x.cu": "template <class T> __global__ void k(T* __restrict__) {}\n"
                             "#ifdef _MSC_VER\n#else\ntemplate __global__ void k<int>(int*);\n"
                             "#endif\n"})
    result = _run(tree, files=("x.cu",), expect=1)
    assert result.changes == {}
    assert [s.action for s in result.sites] == ["already"]


def test_nested_instantiation_macro_and_namespace() -> None:
    tree = DictTree({"x.cu": (
        "template <class T> __global__ void k(T* __restrict__) {}\n"
        "#define ONE(T) template __global__ void k<T>(T*);\n"
        "#define ALL() ONE(int) ONE(float)\n"
        "namespace fb {\n"
        "ALL()\n"
        "template void g<int>(int);\n"
        "}\n")})
    result = _run(tree, files=("x.cu",), expect=2)
    assert result.changes["x.cu"].endswith(
        "namespace fb {\n#if !defined(_MSC_VER)\nALL()\ntemplate void g<int>(int);\n#endif\n}\n")


# --- the public analysis that `apply()` and `flashbuild scan` share ---------------------------

def test_find_sites_is_what_apply_reports() -> None:
    tree = _tree()
    sources = {p: cxx.parse(t, p) for p, t in tree.files.items()}
    params = ExplicitInstantiationsParams(files=("*.cu",))
    files = sorted(p for p in tree.files if p.endswith(".cu"))
    found = [(s.path, s.line, s.action) for s in find_sites(sources, files, params)]
    applied = [(s.path, s.line, s.action) for s in _run(tree).sites
               if s.kind != "removed-instantiation"]
    assert found == applied
    kept = [s.note for s in find_sites(sources, files, params) if s.action == "keep"]
    assert kept == ["host template launch_rms_norm is referenced from use.cu:7"]


def test_file_facts_are_plain_data() -> None:
    # The scan computes them in worker processes and sends them back: they must pickle.
    text = (BASE / "input" / "norm.cu").read_text()
    facts = file_facts("norm.cu", text)
    assert pickle.loads(pickle.dumps(facts)) == facts
    assert facts.instantiations and facts.macros and facts.may_define_kernels
    assert "launch_rms_norm" in facts.tokens


def test_file_facts_skip_the_parse_when_nothing_can_be_a_site() -> None:
    facts = file_facts("h.h", "template <typename T> struct S { T x; };\n#if defined(X)\n#endif\n")
    assert facts == FileFacts(path="h.h", tokens=facts.tokens)


HOST_TREE = {
    "lib.cu": "template <typename T> void f(T* p) { *p = T(); }\n"
              "template void f<float>(float*);\n"
              "template <typename T> void g(T* p) { *p = T(); }\n"
              "template void g<float>(float*);\n",
    "use.cpp": "template <typename T> void f(T*);\nvoid use(float* p) { f<float>(p); }\n",
    "mention.cpp": "// calls g? no: only in a comment\nint x;\n",
    **{f"other{i}.cpp": f"int unrelated{i}(int v) {{ return v + {i}; }}\n" for i in range(20)},
}


def test_references_come_from_the_index_and_parse_only_candidates() -> None:
    facts = {p: file_facts(p, t) for p, t in sorted(HOST_TREE.items())}
    loaded: list[str] = []

    def load(path: str) -> cxx.Source:
        loaded.append(path)
        return cxx.parse(HOST_TREE[path], path)

    analysis = InstantiationAnalysis(facts, load)
    sites = analysis.sites(["lib.cu"], ExplicitInstantiationsParams(files=("lib.cu",)))
    assert [(s.line, s.kernel, s.action, s.note) for s in sites] == [
        (2, False, "keep", "host template f is referenced from use.cpp:2"),
        (4, False, "keep", "MSVC accepts host template instantiations, and no kernel "
         "instantiation of this file is guarded"),
    ]
    # Only the other files whose tokens name `f` or `g` were parsed, to confirm a reference
    # (`g` in a comment is a token, not a reference); the 20 unrelated files never were.
    assert sorted(loaded) == ["mention.cpp", "use.cpp"]


def test_kernel_template_defined_in_another_file() -> None:
    files = {"k.cuh": "template <typename T> __global__ void k(T* __restrict__ p) {}\n",
             "k.cu": "#include \"k.cuh\"\ntemplate void k<float>(float*);\n"}
    sources = {p: cxx.parse(t, p) for p, t in files.items()}
    sites = find_sites(sources, ["k.cu"], ExplicitInstantiationsParams(files=("k.cu",)))
    assert [(s.line, s.kernel, s.action) for s in sites] == [(2, True, "edit")]


def test_macro_through_macro_from_another_file() -> None:
    files = {"m.h": "#define INST(T) template __global__ void k<T>(T*);\n"
                    "#define INST_ALL() INST(float) INST(double)\n",
             "k.cu": "template <typename T> __global__ void k(T* __restrict__ p) {}\nINST_ALL()\n"}
    sources = {p: cxx.parse(t, p) for p, t in files.items()}
    analysis = InstantiationAnalysis.of_sources(sources)
    assert analysis.macros["INST_ALL"].instantiates == "k"
    assert analysis.macros["INST_ALL"].kernel
    sites = analysis.sites(["k.cu"], ExplicitInstantiationsParams(files=("k.cu",)))
    assert [(s.line, s.found.via_macro, s.action) for s in sites] == [(2, "INST_ALL", "edit")]


@pytest.mark.parametrize(("files", "kept"), [
    # The launcher is called only from a macro body that another file expands.
    ({"b.cu": "template <typename T> void launch_k(T* x, int n);\n"
              "#define DISPATCH(T, x, n) launch_k<T>(reinterpret_cast<T*>(x), n)\n"
              "void run(void* x, int n, bool d) {\n"
              "  if (d) { DISPATCH(double, x, n); } else { DISPATCH(float, x, n); }\n}\n"},
     "host template launch_k is referenced from b.cu:2"),
    # The macro sits in a header; a third file expands it.
    ({"dispatch.h": "template <typename T> void launch_k(T* x, int n);\n"
                    "#define DISPATCH(T, x, n) launch_k<T>(x, n)\n",
      "run.cu": "#include \"dispatch.h\"\nvoid run(float* x, int n) { DISPATCH(float, x, n); }\n"},
     "host template launch_k is referenced from dispatch.h:2"),
    # A macro nobody expands references nothing.
    ({"b.cu": "#define UNUSED(T, x, n) launch_k<T>(x, n)\nint y;\n"}, ""),
])
def test_a_host_launcher_called_through_a_macro_body_is_kept(files: dict[str, str],
                                                              kept: str) -> None:
    """A guard on such an instantiation would end the Windows build with LNK2019: the call
    is written in the `#define`, made where the macro is expanded."""
    files = {"a.cu": "template <typename T> __global__ void k(T* __restrict__ x, int n) {}\n"
                     "template <typename T> void launch_k(T* x, int n) { k<T><<<1, 1>>>(x, n); }\n"
                     "template __global__ void k<float>(float* x, int n);\n"
                     "template void launch_k<float>(float* x, int n);\n", **files}
    sources = {p: cxx.parse(t, p) for p, t in files.items()}
    sites = find_sites(sources, ["a.cu"], ExplicitInstantiationsParams(files=("a.cu",)))
    assert [(s.line, s.action, s.note) for s in sites] == [
        (3, "edit", "parameter 1 is `T* __restrict__ x` at a.cu:1; here it has no "
         "`__restrict__`, and MSVC mangles `__restrict__` and a pointer's own `const` as "
         "written"), (4, "keep" if kept else "edit", kept)]


# --- which kernel instantiations MSVC rejects: the parameter list against the template's ------

def _kernel_sites(files: dict[str, str]) -> list[tuple[int, str, bool | None]]:
    sources = {p: cxx.parse(t, p) for p, t in files.items()}
    sites = find_sites(sources, ["k.cu"], ExplicitInstantiationsParams(files=("k.cu",)))
    return [(s.line, s.action, s.repeats_definition) for s in sites if s.kernel]


def test_an_instantiation_that_repeats_its_definition_is_kept() -> None:
    # The shape of a tree that builds with MSVC in its own CI: every qualifier repeated,
    # `__restrict__` and the pointer's own `const` included, type names substituted.
    assert _kernel_sites({"k.cu": (
        "template <typename T, int B>\n"
        "__global__ void q(float* code, T* __restrict__ const A, float* absmax,\n"
        "                  const int n) {}\n"
        "template __global__ void q<half, 4096>(float* code, half* __restrict__ const A,\n"
        "                                       float* absmax, const int n);\n"
        "template __global__ void q<float, 256>(float*, float* __restrict__ const, float*,\n"
        "                                       int);\n")}) == [
            (4, "keep", True), (6, "keep", True)]


@pytest.mark.parametrize("instantiated", [
    "const float*, int",                 # no __restrict__ (FlashRT's 45 lines)
    "const float* __restrict__ const, int",  # a pointer's own const the definition lacks
])
def test_an_instantiation_that_differs_from_its_definition_is_guarded(instantiated: str
                                                                      ) -> None:
    files = {"k.cu": "template <typename T> __global__ void k(const T* __restrict__ x, int n) {}\n"
                     f"template __global__ void k<float>({instantiated});\n"}
    assert _kernel_sites(files) == [(2, "edit", False)]


def test_an_instantiation_that_cannot_be_compared_is_still_guarded() -> None:
    # A qualifier spelled through a macro is a parse error in the list: no comparison, the
    # transform guards as before and the scan says "may".
    files = {"k.cu": "#define RESTRICT __restrict__\n"
                     "template <typename T> __global__ void k(T* RESTRICT x) {}\n"
                     "template __global__ void k<float>(float* RESTRICT);\n"}
    assert _kernel_sites(files) == [(3, "edit", None)]


def test_an_overload_with_the_same_qualifiers_is_the_match() -> None:
    files = {"k.cu": "template <typename T> __global__ void k(T* __restrict__ x, int n) {}\n"
                     "template <typename T> __global__ void k(T* x, int n, int m) {}\n"
                     "template __global__ void k<float>(float*, int, int);\n"
                     "template __global__ void k<float>(float* __restrict__, int);\n"}
    assert _kernel_sites(files) == [(3, "keep", True), (4, "keep", True)]


def test_the_definition_in_the_sites_own_file_is_the_one_compared() -> None:
    # Two files define a kernel template of one name (a review, 2026-11-29): c.cu's own
    # template has `__restrict__` and its instantiation does not.
    files = {"a.cu": "template <class T> __global__ void kernel(T* x, int n) {}\n"
                     "template __global__ void kernel<float>(float* x, int n);\n",
             "k.cu": "template <class T> __global__ void kernel(T* __restrict__ x, int n) {}\n"
                     "template __global__ void kernel<float>(float* x, int n);\n"}
    assert _kernel_sites(files) == [(2, "edit", False)]


def test_a_macro_with_several_instantiations_compares_each() -> None:
    # A review, 2026-11-29: only the body's first instantiation was compared, so k2's
    # missing `__restrict__` went unseen and the use was kept.
    body = ("template <class T> __global__ void k1(T* __restrict__ x) {}\n"
            "template <class T> __global__ void k2(T* __restrict__ x) {}\n"
            "#define INST(T) template __global__ void k1<T>(T* __restrict__ x); \\\n"
            "  template __global__ void k2<T>(T* @x);\n"
            "INST(float)\n")
    assert _kernel_sites({"k.cu": body.replace("@", "")}) == [(5, "edit", False)]
    assert _kernel_sites({"k.cu": body.replace("@", "__restrict__ ")}) == [(5, "keep", True)]


def test_a_cv_qualified_template_argument_is_no_mismatch() -> None:
    files = {"k.cu": "template <class T> __global__ void k(T* __restrict__ x) {}\n"
                     "template __global__ void k<const float>(const float* __restrict__ x);\n"
                     "template __global__ void k<const int>(const int* x);\n"}
    assert _kernel_sites(files) == [(2, "keep", True), (3, "edit", None)]


@pytest.mark.parametrize("files", [
    {"k.cu": "template <class T> __global__ void k(T* __restrict__ x, int n) {}\n"
             "template __global__ void k<float>(float* RESTRICT, int);\n"},
    {"k.cuh": "template <class T> __global__ void k(T* RESTRICT, int);\n",
     "k.cu": "#include \"k.cuh\"\n#define RESTRICT __restrict__\n"
             "template <class T> __global__ void k(T* RESTRICT x, int n) {}\n"
             "template __global__ void k<float>(float*, int);\n"},
])
def test_a_qualifier_macro_read_as_a_name_gives_no_verdict(files: dict[str, str]) -> None:
    (site,) = _kernel_sites(files)
    assert site[1:] == ("edit", None)


def test_host_instantiations_are_guarded_only_beside_guarded_kernels() -> None:
    # bitsandbytes' kernels.cu: every kernel instantiation repeats its definition, so the
    # file needs no edit for MSVC, and its two unreferenced host instantiations stay too.
    lone = ("template <class T> __global__ void k(T* __restrict__ x) {}\n"
            "template __global__ void k<float>(float* __restrict__ x);\n"
            "template <class T> void run(T* x) { k<T><<<1, 1>>>(x); }\n"
            "template void run<float>(float* x);\n")
    files = {"k.cu": lone}
    sources = {p: cxx.parse(t, p) for p, t in files.items()}
    sites = find_sites(sources, ["k.cu"], ExplicitInstantiationsParams(files=("k.cu",)))
    assert [(s.line, s.kernel, s.action) for s in sites] == [(2, True, "keep"),
                                                             (4, False, "keep")]
    # With a kernel instantiation MSVC rejects, the host one is guarded with it, as before.
    files = {"k.cu": lone.replace("(float* __restrict__ x);", "(float* x);")}
    sources = {p: cxx.parse(t, p) for p, t in files.items()}
    sites = find_sites(sources, ["k.cu"], ExplicitInstantiationsParams(files=("k.cu",)))
    assert [(s.line, s.kernel, s.action) for s in sites] == [(2, True, "edit"),
                                                             (4, False, "edit")]
