"""`flashbuild ci`: GitHub Actions workflows that build a tree's wheel matrix with flashbuild.

`workflow.py` turns the options into a checked `CiPlan` (every arch against every CUDA of the
matrix, runner labels, the recipe's `[install]`) and renders the template
`resources/wheels.yml`; `command.py` is the stage the CLI calls.
"""
