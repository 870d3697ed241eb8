"""The orchestration above the stages: patch → build → install → verify.

The stages (scanning, patching, building, installing, verifying) never import a later stage;
what runs them in order, and what needs more than one of them (the build driver installs what
it built and reads its binaries back), lives here, above them — as scikit-build-core keeps
`build/` above `builder/`. tests/unit/test_layers.py holds the rule.
"""
