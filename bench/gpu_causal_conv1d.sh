#!/usr/bin/env bash
# causal-conv1d through the setuptools backend on the GPU machine, in one or two calls:
#   bash bench/gpu_causal_conv1d.sh start OUTDIR   # install, unpack, start the cold build
#   bash bench/gpu_causal_conv1d.sh finish OUTDIR  # wait for it; no-op rebuild, verify
#   bash bench/gpu_causal_conv1d.sh more OUTDIR    # pip's re-run of the same build, the
#                                                  # tree's own tests
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
if [ "$mode" = more ]; then :; else
# finish: wait for the cold build (bounded), then everything else
for _ in $(seq 1 110); do [ -f /tmp/cc/build.seconds ] && break; sleep 5; done
cp /tmp/cc/build.json /tmp/cc/build.err /tmp/cc/build.rc /tmp/cc/build.seconds "$out/" 2>/dev/null
echo "cold build: rc=$(cat /tmp/cc/build.rc 2>/dev/null) seconds=$(cat /tmp/cc/build.seconds 2>/dev/null)"
tail -5 /tmp/cc/build.err
[ "$(cat /tmp/cc/build.rc 2>/dev/null)" = 0 ] || exit 1
t0=$(secs); fb build --recipe causal-conv1d --source $tree --arch sm_90a --json > "$out/rebuild.json"
t1=$(secs); echo "no-op rebuild: $(python3 -c "print(round($t1 - $t0, 3))") s" | tee "$out/noop.txt"
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
t0=$(secs); bash /tmp/cc/pip_rerun.sh > "$out/pip_rerun.log" 2>&1; rc=$?; t1=$(secs)
echo "pip re-run: rc=$rc $(python3 -c "print(round($t1 - $t0, 3))") s" | tee "$out/pip_rerun.txt"
# the tree's own tests against the installed package (run outside the tree)
mkdir -p /tmp/cctests && cp $tree/tests/test_causal_conv1d.py /tmp/cctests/
cd /tmp/cctests && timeout 240 python3 -m pytest test_causal_conv1d.py -q -x -p no:cacheprovider \
  -k "${CC_TESTS:-update or varlen or 784}" 2>&1 | tail -15 | tee "$out/tests.txt"
