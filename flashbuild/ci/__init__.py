"""`flashbuild ci`: GitHub Actions workflows that build a tree's wheel matrix with flashbuild.

`workflow.py` turns the options into a checked `CiPlan` (every arch against every CUDA of the
matrix, runner labels, the recipe's `[install]`, each job's estimated compile time against the
6-hour cap) and renders the template `resources/wheels.yml`; `estimate.py` holds the measured
seconds-per-unit table and reads the tree's compile units; `command.py` is the stage the CLI
calls.
"""
