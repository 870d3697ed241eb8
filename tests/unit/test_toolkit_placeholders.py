"""`{cuda_major}` and `{cuda_version}` in a recipe's [[build.env]]: rendered from the toolkit
the build uses, refused with the reason when its release is unknown; and the variable names
a draft gives them (a setup.py that raised because TMS_CUDA_MAJOR was unset)."""

from __future__ import annotations

import pytest
from packaging.version import Version

from flashbuild.arch import parse_arch_spec
from flashbuild.errors import UsageError
from flashbuild.pipeline.command import recipe_settings
from flashbuild.recipes.load import parse_recipe
from flashbuild.recipes.when import WhenContext
from flashbuild.source.setup_record import toolkit_value

_RECIPE = '''[recipe]
name = "t"
[source]
path = "t"
[build]
backend = "setuptools"
[[build.env]]
set = { TMS_CUDA_MAJOR = "{cuda_major}", TAG = "cu{cuda_version}-sm{arch_numbers}" }
'''


def test_the_toolkit_placeholders_render_from_the_release_the_build_uses() -> None:
    spec = parse_arch_spec("sm_90a")
    recipe = parse_recipe(_RECIPE, None)
    ctx = WhenContext(platform="linux", arch=spec, cuda=Version("12.8"))
    _defines, _args, env = recipe_settings(recipe, ctx, spec)
    assert env == {"TMS_CUDA_MAJOR": "12", "TAG": "cu12.8-sm90"}


def test_an_unknown_release_stops_with_the_value_that_needs_it() -> None:
    spec = parse_arch_spec("sm_90a")
    recipe = parse_recipe(_RECIPE, None)
    with pytest.raises(UsageError, match=r"set\.TMS_CUDA_MAJOR.*\{cuda_major\}.*release"):
        recipe_settings(recipe, WhenContext(platform="linux", arch=spec), spec)


def test_an_unknown_placeholder_is_still_refused_when_the_recipe_loads() -> None:
    with pytest.raises(Exception, match=r"\{cuda_minor\}.*not a placeholder.*\{cuda_major\}"):
        parse_recipe(_RECIPE.replace("{cuda_major}", "{cuda_minor}"), None)


@pytest.mark.parametrize(("name", "value"), [
    ("TMS_CUDA_MAJOR", "{cuda_major}"),
    ("CUDA_MAJOR_VERSION", "{cuda_major}"),
    ("CUDA_VERSION_MAJOR", "{cuda_major}"),
    ("MY_CU_MAJOR", "{cuda_major}"),
    ("CUDA_VERSION", "{cuda_version}"),
    ("PROJECT_CUDA_VER", "{cuda_version}"),
    ("CU_VERSION", "{cuda_version}"),
    # Not the release: a path, a switch, an arch, another library's version.
    ("CUDA_HOME", None),
    ("FORCE_CUDA", None),
    ("CUDA_ARCH_LIST", None),
    ("CUDNN_VERSION", None),
    ("CUDAHOSTCXX", None),
])
def test_a_variable_named_for_the_cuda_release_gets_its_placeholder(
        name: str, value: str | None) -> None:
    assert toolkit_value(name) == value
