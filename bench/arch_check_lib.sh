#!/usr/bin/env bash
# Shared by bench/arch_check_queue*.sh (sourced): the work folder, one summary line per step.
work=/tmp/ac
now() { python3 -c "import time; print(f'{time.monotonic():.3f}')"; }
say() { echo "$*" | tee -a "$work/summary.txt"; }
timed() {  # timed NAME COMMAND...: run, keep its output in NAME.txt, one summary line
  local name=$1; shift
  local t0 t1 rc
  t0=$(now); "$@" > "$work/$name.txt" 2>&1; rc=$?; t1=$(now)
  say "$name rc=$rc seconds=$(python3 -c "print(round($t1 - $t0, 2))")"
  return $rc
}
fb() { python3 -m flashbuild "$@"; }
imp() { (cd /tmp && python3 -c "import flashkern; print('imported', flashkern.built_archs())"); }
