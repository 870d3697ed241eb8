"""`python -m flashbuild` runs the same CLI as the console script."""

from __future__ import annotations

from flashbuild.cli import main

if __name__ == "__main__":
    main()
