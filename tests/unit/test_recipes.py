"""Recipe model, loader errors, `when` conditions and the generated JSON schema."""

from __future__ import annotations

import json
import tomllib

import jsonschema
import pytest
from packaging.version import Version

from flashbuild.arch import parse_arch_spec
from flashbuild.errors import RecipeError
from flashbuild.recipes import schema
from flashbuild.recipes.load import bundled_recipes, load_recipe, parse_recipe
from flashbuild.recipes.model import When
from flashbuild.recipes.when import WhenContext, arch_matches, evaluate, make_context
from tests.unit.patching_fakes import FIXTURES, AppendParams, fake_transform

__all__ = ["fake_transform"]

MINIMAL = """\
[recipe]
name = "x"

[[patch]]
id = "one"
diff = "a.patch"

[[patch]]
id = "two"
diff = "b.patch"
fuzz = 1
"""


def test_demo_recipe_loads_into_frozen_dataclasses(fake_transform: object) -> None:
    recipe = load_recipe(FIXTURES / "demo.toml")
    assert recipe.name == "demo"
    assert [s.id for s in recipe.patch] == ["add-mul", "win-note", "sm120-note"]
    assert recipe.patch[0].expect.hunks == 1
    assert recipe.patch[1].when.platform == ("windows",)
    assert recipe.patch[1].params == AppendParams(path="README.md", text="windows only\n")
    assert recipe.build.options[0].define == {"DEMO_WINDOWS": "ON"}
    assert recipe.source_root() == (FIXTURES / "tree").resolve()
    with pytest.raises(AttributeError):
        recipe.recipe.name = "y"  # type: ignore[misc]


def test_unknown_key_suggests_and_points_at_the_line() -> None:
    text = MINIMAL.replace("fuzz = 1", "fuzzz = 1")
    with pytest.raises(RecipeError) as info:
        parse_recipe(text)
    err = info.value
    assert "unknown key `fuzzz`" in err.what
    assert "<recipe>:11" in err.what
    assert "did you mean `fuzz`?" in err.evidence
    assert err.exit_code == 4


def test_a_suggestion_never_names_a_key_the_table_already_has() -> None:
    """`kind` is close to `id`, but a step that has an `id` did not misspell it (issue 28)."""
    base = '[recipe]\nname = "x"\n[[patch]]\nid = "a"\ndiff = "a.patch"\n'
    with pytest.raises(RecipeError) as info:
        parse_recipe(base + 'kind = "b"\n')
    err = info.value
    assert "unknown key `kind`" in err.what
    assert "did you mean" not in err.evidence and "rename" not in err.fix
    assert err.fix == "remove it"
    # Without the `id`, the same key is still offered as the likely misspelling.
    with pytest.raises(RecipeError) as info:
        parse_recipe('[recipe]\nname = "x"\n[[patch]]\ndiff = "a.patch"\nkind = "b"\n')
    assert "did you mean `id`?" in info.value.evidence
    assert info.value.fix == "rename it to `id`"


def test_unknown_top_level_table() -> None:
    with pytest.raises(RecipeError) as info:
        parse_recipe(MINIMAL + "\n[biuld]\ntargets = []\n")
    assert "did you mean `build`?" in info.value.evidence
    assert "<recipe>:13" in info.value.what


def test_wrong_type_names_field_and_expected_type() -> None:
    with pytest.raises(RecipeError) as info:
        parse_recipe(MINIMAL.replace("fuzz = 1", 'fuzz = "1"'))
    assert "`patch[1].fuzz` must be an integer, got a string" in info.value.what


def test_malformed_toml_names_the_line() -> None:
    with pytest.raises(RecipeError) as info:
        parse_recipe(MINIMAL.replace('id = "two"', 'id = "two'))
    assert "not valid TOML (<recipe>:9)" in info.value.what


def test_step_needs_diff_or_transform() -> None:
    with pytest.raises(RecipeError, match="exactly one of `diff` and `transform`"):
        parse_recipe('[recipe]\nname = "x"\n[[patch]]\nid = "a"\n')


def test_bad_literal_and_specifier() -> None:
    with pytest.raises(RecipeError) as info:
        parse_recipe(MINIMAL + '\n[[build.options]]\nwhen = { platform = "windoze" }\n')
    assert "'windows'" in info.value.evidence
    with pytest.raises(RecipeError, match="not a version specifier"):
        parse_recipe(MINIMAL + '\n[[build.options]]\nwhen = { cuda = "twelve" }\n')


def test_unknown_transform_and_bad_params(fake_transform: object) -> None:
    base = '[recipe]\nname = "x"\n[[patch]]\nid = "a"\n'
    with pytest.raises(RecipeError) as info:
        parse_recipe(base + 'transform = "test-apend"\nparams = {path = "a", text = "b"}\n')
    assert "did you mean `test-append`?" in info.value.evidence
    with pytest.raises(RecipeError) as info:
        parse_recipe(base + 'transform = "test-append"\nparams = {path = "a", txt = "b"}\n')
    assert "unknown key `txt`" in info.value.what and "`text`" in info.value.evidence
    with pytest.raises(RecipeError, match="lacks the required key `text`"):
        parse_recipe(base + 'transform = "test-append"\nparams = {path = "a"}\n')


def ctx(platform: str = "linux", arch: str | None = "sm_120", **kw: str) -> WhenContext:
    return make_context(platform=platform, arch=arch, **kw)


@pytest.mark.parametrize(("pattern", "arch", "hit"), [
    ("sm_120", "sm_120a", True), ("120a", "sm_120", False), (">=120", "sm_120", True),
    (">=120", "sm_90a", False), ("*a", "sm_90a", True), ("*a", "sm_90", False),
    ("!90a", "sm_120", True), ("!90a", "sm_90a", False), ("<100", "sm_89", True),
])
def test_arch_patterns(pattern: str, arch: str, hit: bool) -> None:
    assert arch_matches(pattern, parse_arch_spec(arch).archs[0]) is hit


def test_when_explains_every_clause() -> None:
    when = When(platform=("windows",), arch=(">=120",), cuda=">=12.8")
    result = evaluate(when, ctx("windows", "sm_120", cuda="13.0"))
    assert result.matched
    assert [c.clause for c in result.clauses] == ["platform", "arch", "cuda"]
    assert "CUDA 13.0 satisfies >=12.8" in result.reason
    miss = evaluate(when, ctx("linux", "sm_90a"))
    assert not miss.matched
    assert "platform linux is not in windows" in miss.reason
    assert "none of sm_90a matches >=120" in miss.reason
    assert "CUDA version unknown" in miss.reason


def test_arch_all_compiler_and_torch() -> None:
    spec = ctx("linux", "90a;120", compiler="gcc", compiler_version="13.2", torch="2.9.0")
    assert not evaluate(When(arch_all=("*a",)), spec).matched
    assert evaluate(When(arch_all=("90a", ">=120")), spec).matched
    assert evaluate(When(compiler=("gcc",), compiler_version="<15", torch=">=2.9"),
                    spec).matched
    assert not evaluate(When(compiler=("msvc",)), spec).matched


def test_no_gpu_and_no_arch_gives_an_empty_target() -> None:
    empty = make_context(platform="linux", arch=None, gpu_capabilities=[])
    assert empty.arch.archs == ()
    assert any("target arch is empty" in n for n in empty.notes)
    result = evaluate(When(arch=(">=120",)), empty)
    assert not result.matched and "no target arch" in result.reason
    found = make_context(platform="linux", arch=None, gpu_capabilities=[(12, 0)])
    assert [a.sm for a in found.arch.archs] == ["sm_120"]
    assert found.cuda is None and Version("1") > Version("0")


def test_committed_schema_is_current() -> None:
    committed = schema.SCHEMA_PATH.read_text(encoding="utf-8")
    assert committed == schema.render(), (
        "flashbuild/recipes/schema/recipe.schema.json is stale: run "
        "`python -m flashbuild.recipes.schema`")


def test_schema_has_field_docs_and_rejects_unknown_keys() -> None:
    doc = json.loads(schema.render())
    step = doc["$defs"]["PatchStep"]
    assert step["properties"]["fuzz"]["description"].startswith("Context lines")
    validator = jsonschema.Draft202012Validator(doc)
    good = tomllib.loads(MINIMAL)
    assert not list(validator.iter_errors(good))
    bad = tomllib.loads(MINIMAL.replace("fuzz = 1", "fuzzz = 1"))
    assert list(validator.iter_errors(bad))


def test_bundled_recipes_validate_against_the_schema() -> None:
    paths = bundled_recipes()
    if not paths:
        pytest.skip("no bundled recipes yet")
    validator = jsonschema.Draft202012Validator(json.loads(schema.render()))
    for path in paths:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        errors = [e.message for e in validator.iter_errors(data)]
        assert not errors, f"{path.name}: {errors}"
        assert load_recipe(path.stem).file == path.resolve()


def test_unknown_bundled_name() -> None:
    with pytest.raises(RecipeError, match="no recipe `nope`"):
        load_recipe("nope")


def test_every_declared_transform_has_its_code_in_patching() -> None:
    """recipes/transforms.py declares each built-in (name, params, summary) for the loader;
    patching registers the code under the same name with the same params: the loader never
    imports patching (tests/unit/test_layers.py), and the two cannot drift apart."""
    from flashbuild.patching.transforms import registry
    from flashbuild.recipes.transforms import SPECS

    code = registry()
    assert sorted(SPECS) == sorted(code)
    for name, spec in SPECS.items():
        assert (code[name].params, code[name].summary) == (spec.params, spec.summary), name
