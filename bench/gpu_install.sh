#!/usr/bin/env bash
# Sourced by the GPU-machine scripts (bench/gpu_readme.sh, bench/gpu_trees.sh): flashbuild's
# pure-Python dependencies from the wheels carried in .whl/ into /tmp/site (the machine has
# no internet), flashbuild itself editable, and the GPU and torch named in OUT.
# Usage: gpu_install OUT   (returns non-zero with the install log printed when it fails)
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
gpu_install() {
  local out=$1
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || return 1
  python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 \
    || { cat "$out/install.log"; return 1; }
  nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader | tee "$out/gpu.txt"
  python3 -c "import torch; print('torch', torch.__version__)" | tee "$out/torch.txt"
}
