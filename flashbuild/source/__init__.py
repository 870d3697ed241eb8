"""The readers of a kernel tree, below every stage.

What a tree is made of, read without deciding anything about it: the preprocessor state of a
C++/CUDA file and the include graph between files (`pp`, `ppgraph`), which files a build
reaches (`reach`), what a `setup.py` builds (`setuppy`), which headers a host compile reaches
(`hostinclude`), what nvcc's own preprocessor passes keep of a unit (`preprocess`), which code
does no work for a pass and which branch of an `#if` chain a pass takes (`traps`), and whether
the build links device code across units (`separable`). Scan,
patch, build and recipe init read trees through these modules; nothing here imports a stage.
"""
