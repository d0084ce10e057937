#!/usr/bin/env bash
# Run `make STAGE` for each stage in order and print each stage's wall time at the end, also when one fails
# (the run stops at the first failing stage, as make would).
# Usage: scripts/timed-stages.sh STAGE...   (a STAGE may be NAME=TARGET: shown as NAME, run as `make TARGET`)
set -u
cd "$(dirname "$0")/.."
rows=()
status=0
total_start=$(date +%s)
for stage in "$@"; do
    target=${stage#*=}
    stage=${stage%%=*}
    start=$(date +%s)
    make --no-print-directory "$target"
    rc=$?
    took=$(( $(date +%s) - start ))
    if [ "$rc" -eq 0 ]; then outcome=ok; else outcome="FAILED (exit $rc)"; fi
    rows+=("$(printf '%-20s %5d s  %s' "$stage" "$took" "$outcome")")
    if [ "$rc" -ne 0 ]; then status=$rc; break; fi
done
echo
echo "make test: wall time of each stage"
printf '%s\n' "${rows[@]}"
printf '%-20s %5d s\n' "total" "$(( $(date +%s) - total_start ))"
exit "$status"
