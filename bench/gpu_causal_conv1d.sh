#!/usr/bin/env bash
# causal-conv1d through the setuptools backend on the GPU machine, in one or two calls:
#   bash bench/gpu_causal_conv1d.sh start OUTDIR   # install, unpack, start the cold build
#   bash bench/gpu_causal_conv1d.sh finish OUTDIR  # wait for it; no-op rebuild, verify
#   bash bench/gpu_causal_conv1d.sh more OUTDIR    # pip's re-run of the same build, the
#                                                  # tree's own tests (CC_TESTS=none skips them)
#   bash bench/gpu_causal_conv1d.sh pip-start OUTDIR   # the tree's own build, all its archs:
#        CAUSAL_CONV1D_FORCE_BUILD=TRUE MAX_JOBS=<cores> pip install --no-build-isolation
#        --no-deps . in a fresh copy of the pristine tree, timed, in the background
#   bash bench/gpu_causal_conv1d.sh pip-finish OUTDIR  # wait for it (at most ~9 minutes a
#        call: call again while it prints "still running"), then pip's unchanged re-run and
#        flashbuild verify of what pip installed
# Expects the pristine tarball in .devcarry/causal-conv1d.tar.gz and flashbuild's pure-Python
# dependencies as wheels in .whl/ (the machine has no internet). Results land in OUTDIR.
set -u
mode=${1:?start|finish}; out=${2:?OUTDIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if [ ! -d /tmp/site ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site
export PATH=/tmp/site/bin:$PATH
fb() { python3 -m flashbuild "$@"; }
tree=/tmp/cc/causal-conv1d
secs() { python3 -c "import time; print(f'{time.monotonic():.3f}')"; }
if [ "$mode" = start ]; then
  python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 \
    || { cat "$out/install.log"; exit 1; }
  rm -rf /tmp/cc && mkdir -p /tmp/cc && tar xzf .devcarry/causal-conv1d.tar.gz -C /tmp/cc
  nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader | tee "$out/gpu.txt"
  nproc | tee "$out/nproc.txt"
  python3 -m flashbuild --version || exit 1
  setsid bash -c "t0=\$(date +%s.%N); python3 -m flashbuild build --recipe causal-conv1d \
    --source $tree --arch sm_90a --json > /tmp/cc/build.json 2> /tmp/cc/build.err; \
    echo \$? > /tmp/cc/build.rc; t1=\$(date +%s.%N); \
    python3 -c \"print(\$t1 - \$t0)\" > /tmp/cc/build.seconds" > /dev/null 2>&1 < /dev/null &
  echo "started"
  exit 0
fi
pip_tree=/tmp/ccpip/causal-conv1d
if [ "$mode" = pip-start ]; then
  rm -rf /tmp/ccpip && mkdir -p /tmp/ccpip && tar xzf .devcarry/causal-conv1d.tar.gz -C /tmp/ccpip
  # MAX_JOBS = the cores, what flashbuild's jobs plan chose on this machine (build-env.json)
  setsid bash -c "cd $pip_tree && t0=\$(date +%s.%N); CAUSAL_CONV1D_FORCE_BUILD=TRUE \
    MAX_JOBS=$(nproc) python3 -m pip install -v --no-build-isolation --no-deps . \
    > /tmp/ccpip/cold.log 2>&1; echo \$? > /tmp/ccpip/cold.rc; t1=\$(date +%s.%N); \
    python3 -c \"print(\$t1 - \$t0)\" > /tmp/ccpip/cold.seconds" > /dev/null 2>&1 < /dev/null &
  echo "pip cold build started"
  exit 0
fi
if [ "$mode" = pip-finish ]; then
  for _ in $(seq 1 ${CC_WAIT_POLLS:-108}); do [ -f /tmp/ccpip/cold.seconds ] && break; sleep 5; done
  if [ ! -f /tmp/ccpip/cold.seconds ]; then
    echo "still running: $(grep -c 'arch=compute' /tmp/ccpip/cold.log) gencode flags seen, last line:"
    grep -E '^\[[0-9]+/[0-9]+\]' /tmp/ccpip/cold.log | tail -2 | cut -c1-200
    ps -eo etimes,args | grep -E 'nvcc|cicc|ptxas' | grep -v grep | cut -c1-160 | head -8
    exit 3
  fi
  cp /tmp/ccpip/cold.seconds /tmp/ccpip/cold.rc "$out/" 2>/dev/null
  tail -c 200000 /tmp/ccpip/cold.log > "$out/pip_cold.log"
  echo "pip cold build (all archs): rc=$(cat /tmp/ccpip/cold.rc) seconds=$(cat /tmp/ccpip/cold.seconds)" \
    | tee "$out/pip_cold.txt"
  grep -o 'arch=compute_[0-9a-z]*,code=sm_[0-9a-z]*' /tmp/ccpip/cold.log | sort -u | tr '\n' ' ' \
    | tee -a "$out/pip_cold.txt"; echo
  t0=$(secs)
  (cd $pip_tree && CAUSAL_CONV1D_FORCE_BUILD=TRUE MAX_JOBS=$(nproc) python3 -m pip install -v \
    --no-build-isolation --no-deps . > "$out/pip_rerun_own.log" 2>&1); rc=$?; t1=$(secs)
  echo "pip unchanged re-run of its own build: rc=$rc $(python3 -c "print(round($t1 - $t0, 3))") s" \
    | tee -a "$out/pip_cold.txt"
  fb verify --package causal_conv1d --arch sm_90 --no-strict-arch 2>&1 | head -30 \
    | tee "$out/pip_verify.txt"
  exit 0
fi
if [ "$mode" = more ]; then :; else
# finish: wait for the cold build (bounded), then everything else
for _ in $(seq 1 110); do [ -f /tmp/cc/build.seconds ] && break; sleep 5; done
cp /tmp/cc/build.json "$out/" 2>/dev/null
echo "cold build: rc=$(cat /tmp/cc/build.rc 2>/dev/null) seconds=$(cat /tmp/cc/build.seconds 2>/dev/null)" \
  | tee "$out/summary.txt"
tail -5 /tmp/cc/build.err
[ "$(cat /tmp/cc/build.rc 2>/dev/null)" = 0 ] || exit 1
# the no-op rebuild five times (the whole command, interpreter start-up included); the median
noop=""
for i in 1 2 3 4 5; do
  t0=$(secs); fb build --recipe causal-conv1d --source $tree --arch sm_90a --json > "$out/rebuild.json"
  t1=$(secs); noop="$noop $(python3 -c "print(round($t1 - $t0, 3))")"
done
echo "no-op rebuild (5 runs):$noop s; median $(python3 -c "import statistics, sys; print(statistics.median(map(float, sys.argv[1:])))" $noop) s" \
  | tee -a "$out/summary.txt"
python3 -X importtime -m flashbuild build --recipe causal-conv1d --source $tree --arch sm_90a \
  --json 2> "$out/importtime.txt" > /dev/null
fb verify --package causal_conv1d --arch sm_90a --json > "$out/verify.json"; echo "verify rc=$?"
fb verify --package causal_conv1d --arch sm_90a 2>&1 | head -30
fi
[ "$mode" = finish ] && exit 0
# mode `more`: pip's own unchanged re-run of the same build (same tree, same environment,
# objects present), then the tree's own tests
bdir=$(python3 -c "import json; print(json.load(open('/tmp/cc/build.json'))['build_dir'])")
python3 - "$bdir" > /tmp/cc/pip_rerun.sh <<'PY'
import json, shlex, sys
d = json.load(open(sys.argv[1] + "/logs/build-env.json"))
argv = [a for a in d["argv"] if a not in ("-v",)]
print("cd " + shlex.quote(d["cwd"]) + " && env " + " ".join(shlex.quote(f"{k}={v}") for k, v in d["env"].items()) + " " + " ".join(shlex.quote(a) for a in argv) + " -w /tmp/cc/pipdist")
PY
for i in 1 2; do
  t0=$(secs); bash /tmp/cc/pip_rerun.sh > "$out/pip_rerun.log" 2>&1; rc=$?; t1=$(secs)
  echo "pip re-run $i: rc=$rc $(python3 -c "print(round($t1 - $t0, 3))") s" | tee -a "$out/summary.txt"
done
# the tree's own tests against the installed package (run outside the tree)
[ "${CC_TESTS:-}" = none ] && exit 0
mkdir -p /tmp/cctests && cp $tree/tests/test_causal_conv1d.py /tmp/cctests/
cd /tmp/cctests && timeout 240 python3 -m pytest test_causal_conv1d.py -q -x -p no:cacheprovider \
  -k "${CC_TESTS:-update or varlen or 784}" 2>&1 | tail -15 | tee "$out/tests.txt"
