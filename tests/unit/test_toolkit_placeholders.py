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
from flashbuild.source.setup_record import demanded_variable, toolkit_value

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


def test_a_cmake_define_renders_the_toolkit_placeholders_too() -> None:
    spec = parse_arch_spec("sm_90a")
    recipe = parse_recipe(_RECIPE + '[[build.options]]\ndefine = { CUDA_TAG = "{cuda_major}" }\n',
                          None)
    defines, _args, _env = recipe_settings(
        recipe, WhenContext(platform="linux", arch=spec, cuda=Version("13.0")), spec)
    assert defines == {"CUDA_TAG": "13"}
    with pytest.raises(UsageError, match=r"define\.CUDA_TAG"):
        recipe_settings(parse_recipe(_RECIPE.split("[[build.env]]", maxsplit=1)[0] +
                                     '[[build.options]]\ndefine = { CUDA_TAG = "{cuda_major}" }\n',
                                     None), WhenContext(platform="linux", arch=spec), spec)


def test_a_key_error_of_a_variable_the_record_saw_read_is_a_demand() -> None:
    # `os.environ["TMS_CUDA_MAJOR"]` with it unset: a KeyError quoting the name.
    text = "KeyError: 'TMS_CUDA_MAJOR' (setup.py:12)"
    assert demanded_variable(text, ["PATH", "TMS_CUDA_MAJOR"]) == "TMS_CUDA_MAJOR"
    # A dictionary's missing key, not a variable read: nothing.
    assert demanded_variable(text, ["PATH"]) is None
    assert demanded_variable("RuntimeError: FOO_BAR must be set") == "FOO_BAR"


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
    ("CUDA_MAJOR_VER", "{cuda_major}"),
    # Not the release: a path, a switch, an arch, another library's version, a piece or
    # another spelling of the release (`CU_VERSION` is PyTorch's builders' `cu128`).
    ("CU_VERSION", None),
    ("CUDA_VERSION_MINOR", None),
    ("CUDA_VERSION_NODOT", None),
    ("CUDA_MAJOR_ARCH", None),
    ("CUDA_MAJOR_MINOR", None),
    ("CUDA_HOME", None),
    ("FORCE_CUDA", None),
    ("CUDA_ARCH_LIST", None),
    ("CUDNN_VERSION", None),
    ("CUDAHOSTCXX", None),
])
def test_a_variable_named_for_the_cuda_release_gets_its_placeholder(
        name: str, value: str | None) -> None:
    assert toolkit_value(name) == value
