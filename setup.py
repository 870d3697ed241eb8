"""Ship the repo's `recipes/`, `patches/` and `csrc/` inside a regular wheel.

The top-level folders stay the source of truth: the editable install reads them in place
(`flashbuild.recipes.load.recipes_dir` looks next to the package). A regular wheel has no repo
next to the package, so build_py copies them to `flashbuild/_bundled/` (the name is
`load.BUNDLED_DIR`); the recipes' relative paths (`../csrc`, `../patches/x.patch`) resolve
there unchanged. pyproject.toml alone cannot do this: package-data only takes files inside a
package folder.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
BUNDLED = ("recipes", "patches", "csrc")
#: Build products and caches a working tree may hold; never shipped.
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".flashbuild", "*.so", "*.pyd",
                                "*.o", "*.obj")


class BuildPyWithBundled(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:
            # An editable install reads the top-level folders where they are.
            return
        target = Path(self.build_lib) / "flashbuild" / "_bundled"
        # build/lib outlives a build: drop a previous copy so deleted files do not linger.
        shutil.rmtree(target, ignore_errors=True)
        for name in BUNDLED:
            shutil.copytree(ROOT / name, target / name, ignore=IGNORE)


setup(cmdclass={"build_py": BuildPyWithBundled})
