"""flashbuild: detect, patch, build, install and verify CUDA kernel extensions for new GPUs."""

from __future__ import annotations

__version__ = "0.1.0"
