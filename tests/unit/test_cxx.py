"""The tree-sitter helpers on small C++/CUDA snippets."""

from __future__ import annotations

from flashbuild.source import cxx

SOURCE = """\
#include <dlfcn.h>
#include "x.h"
template <typename T>
__global__ void k(T* x, int n) { x[0] = n; }
template __global__ void k<float>(
    float*, int);
#ifndef _MSC_VER
template void f<int>(int);
#else
template void f<long>(long);
#endif
#define INST(T) template __global__ void k<T>(T*, int);
INST(double)
INST(char)
#define INST2(T) template void f<T>(T)
INST2(short);
void g() { x.template f<int>(); k<float><<<1, 2>>>(p, 3); }
extern "C" { void* open_it(const char* path, int flags = 0); }
namespace fb { bool ready(); }
"""


def _src() -> cxx.Source:
    return cxx.parse(SOURCE, "a.cu")


def test_language_and_parser_are_cached() -> None:
    assert cxx.language() is cxx.language()
    assert cxx.parse(SOURCE, "a.cu") is _src()


def test_instantiations_exclude_decoys() -> None:
    found = [(i.line, i.target, i.is_kernel) for i in cxx.template_instantiations(_src())]
    assert found == [(5, "k<float>", True), (8, "f<int>", False), (10, "f<long>", False)]


def test_enclosing_conditionals_know_the_branch() -> None:
    src = _src()
    nodes = [n for n in cxx.walk(src.root) if n.type == "template_instantiation"]
    then, other = (cxx.enclosing_conditionals(src, n) for n in nodes[1:])
    assert [(c.directive, c.condition, c.branch) for c in then] == [("#ifndef", "_MSC_VER",
                                                                     "then")]
    assert [(c.directive, c.branch) for c in other] == [("#ifndef", "else")]


def test_macros_definitions_and_uses_even_when_the_parse_breaks() -> None:
    src = _src()
    defs = {m.name: m for m in cxx.macro_definitions(src)}
    assert defs["INST"].params == ("T",)
    assert defs["INST2"].body == "template void f<T>(T)"
    uses = [(u.name, u.line, u.args, u.semicolon) for u in cxx.macro_uses(src, defs)]
    assert uses == [("INST", 13, "double", False), ("INST", 14, "char", False),
                    ("INST2", 16, "short", True)]


def test_line_mapping() -> None:
    src = cxx.parse("a\r\nbc\r\nd", "x")
    assert [src.line_of(i) for i in range(len(src.data))] == [1, 1, 1, 2, 2, 2, 2, 3]
    assert src.line_start(5) == 3 and src.line_end(3) == 7 and src.line_end(7) == 8
    assert src.newline == "\r\n"


def test_calls_includes_functions() -> None:
    src = _src()
    launches = [c for c in cxx.calls(src) if c.is_launch]
    assert [(c.name, c.callee) for c in launches] == [("k", "k<float>")]
    assert [(i.path, i.system) for i in cxx.includes(src)] == [("dlfcn.h", True),
                                                               ("x.h", False)]
    fns = {f.name: f for f in cxx.function_declarations(src)}
    assert fns["open_it"].signature == "void* open_it(const char* path, int flags)"
    assert fns["open_it"].extern_c and not fns["open_it"].is_definition
    assert fns["ready"].scope == ("fb",)
    assert fns["g"].is_definition


def test_identifier_references_skip_declarations() -> None:
    src = cxx.parse("template <class T> void h(T);\nvoid u() { h<int>(1); }\n", "u.cu")
    assert [src.line_of(o) for o in cxx.identifier_references(src, "h")] == [2]


def test_normalize_condition() -> None:
    assert cxx.normalize_condition("( ! defined _MSC_VER )") == "!defined(_MSC_VER)"
