#!/usr/bin/env bash
# `make gpu-check` on a GPU machine that has Python, torch, Triton and numba but no internet
# (docs/core/guide.md, "On a GPU machine"):
#
#   benchmarks/gpu_machine.sh prepare [--nvcomp]   # here, with internet: fills .gpucheck/ (ignored by git)
#   benchmarks/gpu_machine.sh run [gpu.py args]    # there, in the checkout with .gpucheck/ beside it
#
# prepare: the wheels the GPU image lacks (for its Python, GPU_PY_VERSION, default 3.12), LASTZ's binary
# (Debian's needs only libc and libm) and the inputs the steps read (the H. pylori pair, the NYX sample, the
# Lublin trace), ~22 MB; --nvcomp adds nvCOMP's wheels (~50 MB more: mind what a tree may carry).
# run: installs the wheels into a temporary folder, puts the checkout on PYTHONPATH as the torchhpc package, and runs
# benchmarks/gpu.py (results under $OUT when set, else runs/bench), all in at most ~8 minutes. PYTHON: the
# interpreter that holds torch there (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=$(realpath -m "${GPUCHECK_DIR:-.gpucheck}")  # where prepare puts, and run reads, what travels

prepare() {
    local py=${GPU_PY_VERSION:-3.12} data=${TORCHHPC_SHARED_DATA:-../shared/data} nvcomp=0
    case "${1:-}" in
        "") ;;
        --nvcomp) nvcomp=1 ;;
        *) echo "gpu_machine.sh: prepare takes only --nvcomp, got '$1'" >&2; exit 2 ;;
    esac
    local wheels=(gymnasium==1.4.0 farama-notifications==0.0.4 cloudpickle==3.1.3 pysz==1.1.0 zfpy==1.0.1.post0
                  fpzip==1.2.5 zstandard==0.25.0)
    ((nvcomp)) && wheels+=(nvidia-nvcomp-cu12==6.0.0.12 nvidia-libnvcomp-cu12==6.0.0.12)
    local lastz
    lastz=$(command -v lastz) || { echo "gpu_machine.sh: lastz is not on PATH (apt-get install lastz)" >&2; exit 1; }
    # built beside, moved into place whole: a failed prepare leaves the last good folder as it was
    local new="$DIR.new"
    rm -rf "$new" && mkdir -p "$new/whl" "$new/data/genomes" "$new/data/foresight/testing" "$new/data/swf"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$py" --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d "$new/whl" "${wheels[@]}"
    cp "$lastz" "$new/lastz"
    cp "$data"/genomes/Hpylori_ELS37.fa "$data"/genomes/Hpylori_SJM180.fa "$new/data/genomes/"
    cp "$data"/foresight/testing/z255_32.h5 "$new/data/foresight/testing/"
    cp "$data"/swf/lublin_256.swf "$new/data/swf/"
    touch "$new/ready"
    rm -rf "$DIR" && mv "$new" "$DIR"
    du -sh "$DIR"
}

run() {
    [[ -f "$DIR/ready" ]] || { echo "gpu_machine.sh: no $DIR/ here: run 'prepare' where there is internet" >&2; exit 1; }
    # the wheels and the package's links in a folder of this run alone, removed when it ends
    local work
    work=$(mktemp -d -t gpucheck.XXXXXX)
    trap "rm -rf '$work'" EXIT  # (expanded now: the trap runs after this function has returned)
    mkdir -p "$work/pp/torchhpc"
    "${PYTHON:-python3}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$work/site" "$DIR"/whl/*.whl
    for d in ext triton_kernels trainers envs; do ln -s "$PWD/$d" "$work/pp/torchhpc/$d"; done
    # the machine's own thread count (make exports OMP_NUM_THREADS=2 for the suite)
    unset OMP_NUM_THREADS
    export PYTHONPATH=$work/pp:$work/site${PYTHONPATH:+:$PYTHONPATH} LASTZ=$DIR/lastz \
        TORCHHPC_SHARED_DATA=$DIR/data PYTHONUNBUFFERED=1
    "${PYTHON:-python3}" -c "import torch, triton, numba; print('gpu-check on', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU', '| torch', torch.__version__, '| triton', triton.__version__, '| numba', numba.__version__, '|', $(nproc), 'cores')"
    "${PYTHON:-python3}" benchmarks/gpu.py --out "${OUT:-runs/bench}" "$@"
}

case "${1:-}" in
    prepare) shift; prepare "$@" ;;
    run) shift; run "$@" ;;
    *) echo "usage: $0 prepare [--nvcomp] | run [gpu.py args]" >&2; exit 2 ;;
esac
