#!/usr/bin/env bash
# Developer harness for a lent GPU machine (see the README's "For developers"): installs the carried wheelhouse, runs the
# GPU suite with the given arguments, and leaves a few files in $OUT (at most 8 come back).
set -uo pipefail
if [ -f /tmp/site/.course-installed ]; then  # a warm machine from the previous call: the stack is there
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
else
    source .whl/setup.sh || exit 1
    touch /tmp/site/.course-installed
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
LOGS=/tmp/gpu-logs; mkdir -p "$LOGS"
collect() {
    for f in "$LOGS"/*.log; do [ -f "$f" ] && { echo "===== $(basename "$f")"; tail -n "${TAIL:-80}" "$f"; }; done > "$OUT/logs.txt" 2>&1
    cp "$LOGS"/records/*.jsonl "$OUT/" 2>/dev/null
    cp results-gpu/*.json results-gpu/*.md results-gpu/*.png "$OUT/" 2>/dev/null
}
trap collect EXIT
python3 -c "from utilities.machinery import buildcache; print(buildcache.generator_environment())"
# BACKGROUND: shell commands to run beside the suite (experiments); their output goes to $LOGS/background.log
[ -n "${BACKGROUND:-}" ] && { bash -c "$BACKGROUND" > "$LOGS/background.log" 2>&1 & }
timeout "${SUITE_TIMEOUT:-560}" python3 -m utilities.gpu_suite --logs "$LOGS" --out results-gpu "$@"
wait
