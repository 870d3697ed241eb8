"""The readers of a kernel tree, below every stage.

What a tree is made of, read without deciding anything about it: the preprocessor state of a
C++/CUDA file and the include graph between files (`pp`, `ppgraph`), which files a build
reaches (`reach`) and what a `setup.py` builds (`setuppy`). Scan, patch, build and recipe
init read trees through these modules; nothing here imports a stage.
"""
