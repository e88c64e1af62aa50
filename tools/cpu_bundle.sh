#!/usr/bin/env bash
# The course's launch-only bundle for an sm_90 GPU, built on this machine's CPU (no GPU needed):
#   bash tools/cpu_bundle.sh [OUT_DIR]        (default: ../bundles beside the checkout)
# Makes a virtual environment with the GPU machine's stack the first time ($CPU_BUILD_VENV, default ../venv-build;
# $PYTHON, default python3.12: the GPU image's Python minor version, which a kernel's IR depends on), builds every
# prebuild job into $COURSE_BUILD_CACHE (default ../cpu-cache) with `python -m utilities.prebuild --arch sm_90`
# ($CPU_BUILD_PARALLEL jobs at a time, default half the cores, each with two code generation workers), then writes OUT_DIR/course-sm90-cpu-<commit>.bundle (the cubins that prebuild touched: a cache that built
# earlier commits keeps theirs too). $CUDA_PINS pins the CUDA wheels to the GPU machine's (its
# `python -c "from utilities.machinery.buildcache import generator_environment as g; print(g())"` names them;
# default: compilers.txt's, the H200 image's of 2026-11-28): an import refuses other NVRTC and nvJitLink versions,
# and nvJitLink 13.0 cannot link what a newer NVVM wrote (ERROR_OUTDATED_LIBRARY). The pins go in after the rest, without dependencies (cuda-toolkit's extras pin
# NVRTC to its own version, which pip's resolver cannot reconcile with an older NVRTC).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/../bundles}
venv=${CPU_BUILD_VENV:-$root/../venv-build}
export COURSE_BUILD_CACHE=${COURSE_BUILD_CACHE:-$root/../cpu-cache}
if [[ ! -x $venv/bin/python ]]; then
    python=${PYTHON:-python3.12}
    if ! "$python" -V > /dev/null 2>&1; then  # a pyenv shim without 3.12 selected: that version's own interpreter
        python=$(ls -d "$(pyenv root 2>/dev/null || echo ~/.pyenv)"/versions/3.12*/bin/python3.12 2>/dev/null | tail -1)
        [[ -n $python ]] || { echo "cpu_bundle: no Python 3.12 here (the GPU image's): set PYTHON" >&2; exit 1; }
    fi
    "$python" -m venv "$venv"
    # as the GPU machine has it (../shared/gpu/setup.sh): nvmath and libmathdx without their extras' dependencies
    # (numba-cuda-mlir would change what nvmath registers with numba), libmathdx in the interpreter's site-packages
    "$venv/bin/python" -m pip install -q numpy==2.3.5 numba==0.68.0 "numba-cuda[cu13]==0.30.4" cuda-bindings==13.3.1 \
        cuda-core==1.2.0 nvidia-cuda-cccl==13.3.5.0.6
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install -q --no-deps nvmath-python==1.0.0 nvidia-libmathdx-cu13==0.3.2.6 \
        ${CUDA_PINS:--r $root/compilers.txt}
fi
commit=$(git -C "$root" rev-parse --short=12 HEAD)
cd "$root"
start=$SECONDS
mkdir -p "$out"
# each job's kernels and keys beside the bundle: a GPU proof's prebuild-keys.json holds the GPU's, to compare
# $CPU_BUNDLE_EXTRA_JOBS: more jobs in the same prebuild and bundle (e.g. utilities.prebuild.CONV_SPEED_JOBS for a
# speed run that should link nothing on the GPU); the course's jobs always
jobs=$("$venv/bin/python" -c 'import os, utilities.prebuild as p
extra = [j for j in os.environ.get("CPU_BUNDLE_EXTRA_JOBS", "").split(",") if j]
print(",".join(dict.fromkeys(p.COURSE_JOBS.split(",") + extra)))')
"$venv/bin/python" -m utilities.prebuild --arch sm_90 --parallel "${CPU_BUILD_PARALLEL:-$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))}" \
    --jobs "$jobs" --keys "$out/course-sm90-cpu-$commit.keys.json"
# the cubins this prebuild touched: a cache that built earlier commits holds their kernels too
"$venv/bin/python" -m utilities.prebuild --arch sm_90 --export "$out/course-sm90-cpu-$commit.bundle" --only-this-run
echo "cpu_bundle: $out/course-sm90-cpu-$commit.bundle in $(((SECONDS - start) / 60)) min"
