#!/usr/bin/env bash
# Trees flashbuild has no bundled recipe for, from their PyPI sdists, one command each on the
# GPU machine (the zero-config build drafts the recipe as `recipe init` does, asking the
# tree's own setup.py in record mode):
#   bash bench/gpu_unseen_trees.sh start OUTDIR   # install flashbuild, unpack, start the queue
#   bash bench/gpu_unseen_trees.sh poll OUTDIR    # wait (at most ~9 min a call), collect results
# For each tree in UNSEEN_TREES (default: megablocks-0.10.0 grouped_gemm-0.3.0
# torch_scatter-2.1.2) the background queue times
#   flashbuild build /tmp/unseen/TREE --arch $UNSEEN_ARCH      (no recipe)
# then one unchanged re-run, `flashbuild verify --package PKG`, and bench/unseen_checks.py
# (the built kernels against torch). Expects the sdists in .devcarry/ and flashbuild's
# pure-Python dependencies as wheels in .whl/ (the machine has no internet).
# Not run yet: written 2026-11-27 in a session that had no device time left (the zero-config
# drafts of these three trees were checked on the CPU machine only, docs/benchmarks.md).
set -u
mode=${1:?start|poll}; out=${2:?OUTDIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
work=/tmp/unseen
arch=${UNSEEN_ARCH:-sm_90a}
trees=${UNSEEN_TREES:-megablocks-0.10.0 grouped_gemm-0.3.0 torch_scatter-2.1.2}

if [ "$mode" = start ]; then
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 \
    || { cat "$out/install.log"; exit 1; }
  python3 -m compileall -q flashbuild /tmp/site >/dev/null
  rm -rf "$work" && mkdir -p "$work"
  for t in $trees; do tar xzf ".devcarry/$t.tar.gz" -C "$work" || exit 1; done
  nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader | tee "$out/gpu.txt"
  python3 -c "import torch; print('torch', torch.__version__)" | tee "$out/torch.txt"
  nproc | tee "$out/nproc.txt"
  cat > "$work/queue.sh" <<'QUEUE'
set -u
cd "$WORK" || exit 1
say() { echo "$*" | tee -a "$WORK/summary.txt"; }
timed() {  # timed NAME COMMAND...: run, keep its output in NAME.txt, one summary line
  local name=$1; shift
  local t0 t1 rc
  t0=$(date +%s.%N); "$@" > "$WORK/$name.txt" 2>&1; rc=$?; t1=$(date +%s.%N)
  say "$name rc=$rc seconds=$(python3 -c "print(round($t1 - $t0, 2))")"
  return $rc
}
for t in $TREES; do
  pkg=$(echo "$t" | sed 's/-[0-9.]*$//')
  timed "$t-build" python3 -m flashbuild build "$WORK/$t" --arch "$ARCH" || { tail -n 25 "$WORK/$t-build.txt"; continue; }
  timed "$t-noop" python3 -m flashbuild build "$WORK/$t" --arch "$ARCH"
  timed "$t-verify" python3 -m flashbuild verify --package "$pkg" --arch "$ARCH"
  (cd /tmp && timed "$t-check" python3 "$REPO/bench/unseen_checks.py" "$pkg")
  tail -n 4 "$WORK/$t-check.txt"
  cp "$WORK/build/flashbuild/"*"$pkg"*.draft.toml "$WORK/$t.draft.toml" 2>/dev/null
done
touch "$WORK/queue.done"
QUEUE
  setsid env WORK="$work" TREES="$trees" ARCH="$arch" REPO="$PWD" bash "$work/queue.sh" \
    > "$work/queue.log" 2>&1 < /dev/null &
  echo "queue started: $trees"
  exit 0
fi

for _ in $(seq 1 "${UNSEEN_POLLS:-100}"); do [ -f "$work/queue.done" ] && break; sleep 5; done
cp "$work"/*.txt "$work"/*.toml "$out"/ 2>/dev/null
tail -n 40 "$work/queue.log" > "$out/queue-tail.txt"
cat "$work/summary.txt" 2>/dev/null
if [ ! -f "$work/queue.done" ]; then
  echo "still running:"; tail -n 5 "$work/queue.log"
  ps -eo etimes,args | grep -E 'nvcc|cicc|ptxas|pip' | grep -v grep | cut -c1-160 | head -6
  exit 3
fi
