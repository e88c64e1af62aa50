#!/usr/bin/env bash
# Developer harness for a lent GPU machine that outlives one call: `start` launches the GPU suite in the background
# (its own process session, so it survives the call) with logs under /tmp/gpu-session; `poll [seconds]` waits up to
# that long for it, then copies the logs, records and report to $OUT (at most 8 files come back) and prints a short
# status. A machine goes back about 30 s after a call ends: poll again at once.
#   tools/gpu_session.sh start --parts prebuild,tests --jobs ...     (arguments of python -m utilities.gpu_suite)
#   tools/gpu_session.sh poll 540
set -uo pipefail
SESSION=/tmp/gpu-session
mode=${1:-poll}; shift || true
case $mode in
start)
    mkdir -p "$SESSION"
    rm -f "$SESSION/exit"  # a warm machine keeps the last run's: poll would stop at once
    if [ ! -f /tmp/site/.course-installed ]; then
        source .whl/setup.sh > "$SESSION/setup.log" 2>&1 || { cat "$SESSION/setup.log"; exit 1; }
        touch /tmp/site/.course-installed
    fi
    export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
    setsid nohup bash -c "python3 -m utilities.gpu_suite --logs $SESSION/logs --out $SESSION/results $*; echo \$? > $SESSION/exit" \
        > "$SESSION/suite.log" 2>&1 < /dev/null &
    echo "started: python -m utilities.gpu_suite $*"
    ;;
poll)
    wait_s=${1:-0}
    for _ in $(seq 1 "$wait_s"); do [ -f "$SESSION/exit" ] && break; sleep 1; done
    grep -h "prebuild: \[" "$SESSION/logs/prebuild.log" 2>/dev/null | tail -n 3
    tail -n 5 "$SESSION/suite.log"
    [ -f "$SESSION/exit" ] && echo "suite exit: $(cat "$SESSION/exit")" || echo "suite still running"
    ( for f in "$SESSION"/logs/*.log; do echo "===== $(basename "$f")"; tail -n "${TAIL:-60}" "$f"; done ) > "$OUT/logs.txt" 2>&1
    cp "$SESSION/suite.log" "$OUT/" 2>/dev/null
    cat "$SESSION"/logs/records/*.jsonl > "$OUT/records.jsonl" 2>/dev/null
    cp "$SESSION"/results/*.json "$SESSION"/results/*.md "$OUT/" 2>/dev/null
    ;;
*)
    echo "usage: tools/gpu_session.sh start <suite args> | poll [seconds]" >&2; exit 2 ;;
esac
