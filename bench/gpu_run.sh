#!/usr/bin/env bash
# The whole GPU-machine run behind the README's GPU numbers, in one command:
#   bash bench/gpu_run.sh OUTDIR
# It expects python3 with torch (CUDA), nvcc on PATH, and flashbuild's pure-Python
# dependencies importable (wheels carried in .whl/ are installed when present, for a machine
# without internet). Each step writes its log and JSON under OUTDIR; a failing step does not
# stop the later ones, and the script exits non-zero if any failed.
set -u
out=${1:?usage: gpu_run.sh OUTDIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 \
  || { cat "$out/install.log"; exit 1; }
failed=0
step() {  # step NAME COMMAND...: run, keep the log, remember a failure
  local name=$1; shift
  echo "== $name: $*"
  "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "   exit $rc"; tail -n 25 "$out/$name.log"
  [ $rc -eq 0 ] || failed=1
}
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader | tee "$out/gpu.txt"
step doctor   sh -c "flashbuild doctor --arch sm_90a --json > '$out/doctor.json'"
step build    sh -c "flashbuild build --arch sm_90a --json > '$out/build.json'"
step rebuild  sh -c "flashbuild build --arch sm_90a --json > '$out/rebuild.json'"
step verify   sh -c "flashbuild verify --bench --json > '$out/verify.json'"
# The GPU tests and the kernel benchmark use the flashkern that `flashbuild build` installed.
step gputests env FLASHKERN_PREBUILT=1 python3 -m pytest tests/gpu -m gpu -q -x -p no:cacheprovider
step kernels  python3 bench/bench_kernels.py --out "$out/bench_kernels.json"
step benchdoctor python3 bench/bench_doctor.py --runs 5
exit $failed
