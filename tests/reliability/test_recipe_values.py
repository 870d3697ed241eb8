"""Recipe values that passed `recipe check` and failed later (issue 22): a NUL in a
`[[build.env]]` value (the build crashed with "embedded null byte" after staging) and a
`macro-edit` replacement naming a group its pattern lacks (an internal error at patch time).
Both are now exit 4 at load time, with the recipe's file:line, for every command."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.reliability.helpers import WIN120, judge

if TYPE_CHECKING:
    from tests.reliability.helpers import Sandbox

RECIPE_ERROR = 4
HEAD = '[recipe]\nname = "v"\n\n[source]\npath = "../tree"\nsources = ["src/*.cpp"]\n\n'
VALUES = {
    "NUL in a build.env value": (
        HEAD + '[build]\nbackend = "setuptools"\n\n[[build.env]]\n'
        'set = { MY_SWITCH = "on\\u0000off" }\n', "`set.MY_SWITCH` holds a NUL character"),
    "NUL in a build.options define": (
        HEAD + '[[build.options]]\ndefine = { GPU_ARCH = "90\\u0000" }\n',
        "`define.GPU_ARCH` holds a NUL character"),
    "macro-edit replacement names group 2 of 1": (
        HEAD + '[[patch]]\nid = "m"\ntransform = "macro-edit"\n'
        'params = { files = ["src/*.cpp"], find = "(a)", replace = "\\\\2", regex = true, '
        'already = "b" }\n', "invalid group reference 2"),
    "macro-edit replacement names an unknown group": (
        HEAD + '[[patch]]\nid = "m"\ntransform = "macro-edit"\n'
        'params = { files = ["src/*.cpp"], find = "(?P<x>a)", replace = "\\\\g<y>", '
        'regex = true, already = "b" }\n', "unknown group name 'y'"),
    # issue 27: `patch` hung on this pattern and `recipe check` called it valid.
    "macro-edit find with catastrophic backtracking": (
        HEAD + '[[patch]]\nid = "m"\ntransform = "macro-edit"\n'
        'params = { files = ["src/*.cpp"], find = "(a+)+$", replace = "b", regex = true, '
        'already = "b" }\n', "repeats a part that itself repeats"),
    "NUL in a sources glob": (
        '[recipe]\nname = "v"\n\n[source]\npath = "../tree"\nsources = ["src/\\u0000*.cpp"]\n',
        "`sources[0]` holds a NUL character"),
    # issue 27: `recipe check` called these valid; `patch` said "matched nothing" (exit 5).
    "NUL in a patch step's files glob": (
        HEAD + '[[patch]]\nid = "m"\ntransform = "macro-edit"\n'
        'params = { files = ["src/a.cpp", "src/\\u0000*.cpp"], find = "a", replace = "b", '
        'already = "b" }\n', "`files[1]` holds a NUL character"),
    "NUL in exclude-sources globs": (
        HEAD + '[[patch]]\nid = "x"\ntransform = "exclude-sources"\n'
        'params = { globs = ["src/\\u0000*.cpp"] }\n',
        "`globs[0]` holds a NUL character"),
}


@pytest.mark.parametrize("name", list(VALUES))
@pytest.mark.parametrize("command", ["check", "patch"])
def test_a_value_no_process_can_take_is_refused_at_load(box: Sandbox, name: str,
                                                        command: str) -> None:
    text, say = VALUES[name]
    recipe = box.recipe_dir / "v.toml"
    recipe.write_text(text)
    box._outside = box.outside()
    args = (["recipe", "check", str(recipe)] if command == "check" else
            ["patch", "--recipe", str(recipe), "--source", str(box.tree), *WIN120])
    out = box.cli(*args)
    judge(f"recipe: {name} ({command})", box, out, code=RECIPE_ERROR, tree=box.pristine,
          say=say)
    assert "v.toml:" in out.output  # the file:line of the value
