#!/usr/bin/env bash
# Developer tool: Nsight Compute's counters for the first launches of chosen kernels of any course program, on a
# lent GPU machine whose runtime lets ncu read them (Firecracker; ../.library/device/H200.md: on gVisor ncu cannot).
# For the questions the probes' timings leave open (why a pass runs at a third of the copy rate: stalls, occupancy,
# issue slots), never for timings: ncu serializes and replays each kernel, and its times are not the course's.
#
#   tools/ncu_kernels.sh OUT_STEM 'REGEX' COUNT -- python3 tools/ozaki2_choice_probe.py --repeats 1
#       profiles the first COUNT launches whose (demangled) name matches REGEX: OUT_STEM.ncu-rep (for the GUI),
#       OUT_STEM.txt (each kernel's sections as text) and OUT_STEM.csv (the raw metrics, one row a metric).
# The clocks are left alone (--clock-control none, as ../.library/device/METHOD.md asks). NCU_SECTIONS replaces the
# default sections (speed of light, occupancy, launch, warp states, scheduler, memory workload), space-separated.
set -uo pipefail
if [ $# -lt 5 ] || [ "$4" != "--" ]; then
    echo "usage: tools/ncu_kernels.sh OUT_STEM 'REGEX' COUNT -- COMMAND..." >&2
    exit 2
fi
stem=$1 regex=$2 count=$3
shift 4
if ! command -v ncu > /dev/null; then
    for candidate in /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu; do
        [ -x "$candidate" ] && { PATH=$(dirname "$candidate"):$PATH; break; }
    done
fi
command -v ncu > /dev/null || { echo "ncu (Nsight Compute) is not on this machine: nothing profiled" >&2; exit 3; }
sections=${NCU_SECTIONS:-SpeedOfLight Occupancy LaunchStats WarpStateStats SchedulerStats MemoryWorkloadAnalysis}
args=()
for s in $sections; do args+=(--section "$s"); done
mkdir -p "$(dirname "$stem")"
ncu --clock-control none --target-processes all --kernel-name-base demangled --kernel-name "regex:$regex" \
    --launch-count "$count" "${args[@]}" --export "$stem" --force-overwrite "$@"
status=$?
if [ -f "$stem.ncu-rep" ]; then
    ncu --import "$stem.ncu-rep" --page details > "$stem.txt" 2>&1
    ncu --import "$stem.ncu-rep" --page raw --csv > "$stem.csv" 2>&1
    echo "ncu: $(grep -c '^  [A-Za-z_]' "$stem.txt") kernel(s) in $stem.txt"
else
    echo "ncu wrote no report (exit $status): the runtime may not let it read the counters" >&2
fi
exit "$status"
