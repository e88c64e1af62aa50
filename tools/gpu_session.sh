#!/usr/bin/env bash
# Developer harness for a lent GPU machine that outlives one call. A background job runs in its own process session
# (setsid, so it survives the call) with logs under /tmp/gpu-session; `poll [seconds]` waits up to that long for it,
# then copies the logs and results to $OUT and prints a short status. A machine goes back about 30 s after a call
# ends: poll again at once. Every call gets the working tree copied anew, and a job whose folder is replaced under it
# fails (FileNotFoundError from os.getcwd): a background job runs from a copy of the tree, /tmp/gpu-session/tree,
# and writes its results under /tmp/gpu-session, never into the tree.
#   tools/gpu_session.sh proof [--bundle .bundle/course.bundle]    (after `git rev-parse --short=12 HEAD > _commit` here)
#                                                                   the course proven (python -m utilities.gpu_proof)
#   tools/gpu_session.sh start --parts prebuild,tests --jobs ...   the GPU suite (arguments of python -m utilities.gpu_suite)
#   tools/gpu_session.sh workshop 2b 3d                             the run-through (arguments of python -m utilities.workshop)
#   tools/gpu_session.sh ledger 2b 4b --parallel 3                  the ledger's run (arguments of ... ledger run)
#   tools/gpu_session.sh mutation --only 2b,3b                      GPU mutants (arguments of tools/mutation_gpu.py)
#   tools/gpu_session.sh job 'python3 tools/launch_overhead.py; python3 tools/ozaki2_report.py --out $SESSION/results'
#                                                                   any commands, in the background (results: $SESSION/results)
#   tools/gpu_session.sh import course.bundle                       import a carried build-cache bundle, in the foreground
#   tools/gpu_session.sh export course.bundle [--max-part-mb 15]    export the build cache into $OUT, in the foreground
#   tools/gpu_session.sh poll 540
# BUNDLE=FILE before start, workshop or ledger imports that bundle first (a fresh machine without a prebuild).
# COURSE_COMMIT names the commit in the ledger's rows; unset, it is read from the file _commit at the tree's root,
# written on the development machine by `git rev-parse --short=12 HEAD > _commit` (untracked, so it travels with the
# tree). Never take it from git on the lent machine: its copy of the repository may report another branch's HEAD
# beside this tree's files (on 2026-11-30 it named main's while candidate4's files ran), and a hash typed by hand
# went wrong once too.
set -uo pipefail
SESSION=/tmp/gpu-session
export SESSION  # a job's commands may name it
mode=${1:-poll}; shift || true
if [ -z "${COURSE_COMMIT:-}" ] && [ -f _commit ]; then COURSE_COMMIT=$(tr -d '[:space:]' < _commit); export COURSE_COMMIT; fi

setup() {  # the wheels installed once per machine; then this call's tree copied to $SESSION/tree, and run from there
    mkdir -p "$SESSION/results" "$SESSION/logs"
    if [ ! -f /tmp/site/.course-installed ]; then
        source .whl/setup.sh > "$SESSION/setup.log" 2>&1 || { cat "$SESSION/setup.log"; exit 1; }
        touch /tmp/site/.course-installed
    fi
    if [ -f "$SESSION/pid" ] && kill -0 "$(cat "$SESSION/pid")" 2>/dev/null && [ ! -f "$SESSION/exit" ]; then
        echo "a job is still running (pid $(cat "$SESSION/pid")): poll it, or kill it first" >&2; exit 1
    fi
    rm -rf "$SESSION/tree" && mkdir -p "$SESSION/tree"
    tar --exclude=./.whl -cf - . | tar -xf - -C "$SESSION/tree"
    cd "$SESSION/tree" || exit 1
    # the committed GPU test runs, where this machine has none yet: the proof splits the test files over its
    # processes by their seconds in the last run it finds in its --out (without them, by count: 556 s against 94)
    for f in results/*-gpu-tests.json; do
        [ -f "$f" ] && [ ! -f "$SESSION/results/${f#results/}" ] && cp "$f" "$SESSION/results/"
    done
    export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
}

import_bundle() {  # FILE: the bundle (or its first part) into the build cache; its lines go to the log and stdout
    python3 -m utilities.prebuild --import "$1" 2>&1 | tee -a "$SESSION/logs/bundle.log"
    return "${PIPESTATUS[0]}"
}

launch() {  # a command in the background, its output in suite.log, its exit status in $SESSION/exit
    rm -f "$SESSION/exit"  # a warm machine keeps the last run's: poll would stop at once
    if [ -n "${BUNDLE:-}" ]; then import_bundle "$BUNDLE" || exit 1; fi
    setsid nohup bash -c "$1; echo \$? > $SESSION/exit" > "$SESSION/suite.log" 2>&1 < /dev/null &
    echo $! > "$SESSION/pid"
    echo "started in $PWD: $1"
}

case $mode in
proof)
    setup
    launch "python3 -m utilities.gpu_proof --logs $SESSION/logs --out $SESSION/results $*"
    ;;
start)
    setup
    launch "python3 -m utilities.gpu_suite --logs $SESSION/logs --out $SESSION/results $*"
    ;;
workshop)
    setup
    launch "python3 -m utilities.workshop $* --json $SESSION/results/workshop.json"
    ;;
ledger)
    setup
    launch "python3 -m utilities.ledger run $* --ledger $SESSION/results/notebooks.json"
    ;;
mutation)
    setup
    launch "python3 tools/mutation_gpu.py $* --json $SESSION/results/mutation-gpu.json"
    ;;
job)
    setup
    launch "$*"
    ;;
import)
    setup
    import_bundle "$1"
    ;;
export)
    setup
    python3 -m utilities.prebuild --export "$OUT/$(basename "$1")" "${@:2}"
    ;;
poll)
    wait_s=${1:-0}
    for _ in $(seq 1 "$wait_s"); do [ -f "$SESSION/exit" ] && break; sleep 1; done
    grep -h "prebuild: \[" "$SESSION/logs/prebuild.log" 2>/dev/null | tail -n 3
    tail -n 5 "$SESSION/suite.log"
    [ -f "$SESSION/exit" ] && echo "exit: $(cat "$SESSION/exit")" || echo "still running"
    ( for f in "$SESSION"/logs/*.log; do echo "===== $(basename "$f")"; tail -n "${TAIL:-60}" "$f"; done ) > "$OUT/logs.txt" 2>&1
    cp "$SESSION/suite.log" "$OUT/" 2>/dev/null
    # at most 8 files come back from $OUT: the results and the steps' files (JSON, XML, whole logs) in one archive
    cat "$SESSION"/logs/records/*.jsonl > "$SESSION/results/records.jsonl" 2>/dev/null
    (cd "$SESSION" && tar -czf "$OUT/results.tar.gz" results $(cd "$SESSION" && ls logs/*.json logs/*.xml logs/*.done logs/*.log 2>/dev/null))
    ;;
*)
    echo "usage: tools/gpu_session.sh proof|start|workshop|ledger|mutation|job <args> | import|export FILE | poll [seconds]" >&2
    exit 2 ;;
esac
