#!/usr/bin/env bash
# Every check of the package on a CUDA GPU in one timed run, most important first, each stage with its own time limit
# inside a budget for the whole run (a lent GPU is timed):
#   tests     the model's CUDA tests (tests/model/test_cuda.py), the CRF kernels against the loops
#             (tests/model/test_crf_kernels.py), the fused-step tests (tests/model/test_fused_step.py: the fused Triton
#             step against the readable one) and the CUDA-graph replay of the speed benchmark
#   profile   benchmark_kernel_profile.py: where one eager bf16 training step's GPU time goes, the top 15 operators
#             and kernels by self CUDA time (torch.profiler), at 32x512 and on a real CoNLL-2003 NER batch of 10, then
#             each fused-step kernel's measured time beside the H200 model's prediction (step_time_model.py) ->
#             kernel_profile.md; over by the run's third minute (tests 120 s at most, then 60 s)
#   wholestep benchmark_graph_step.py: whole-step CUDA graphs (--cuda_graphs) against eager training over 50 steps,
#             the host time per step measured here (eager, replayed, BiLSTM), the host cost of one Triton launch
#             (JIT launcher, compiled kernel's launcher), then one NER and one movie-review epoch with --cuda_graphs
#             beside eager and the BiLSTM with the same character CNN -> graph_step_epochs.{csv,md}, <run>.log
#   speed     benchmark_speed.py: the package's S-LSTM (`slstm`: the fused step, as a user gets it) and its variants
#             (eager, fused, fused + CUDA graphs) against the cuDNN 1- and 2-layer BiLSTM, float32 and bf16, at
#             32x16 ... 32x512 and on real CoNLL-2003 NER and movie-review batches of 10 and 32, with the FLOP and
#             memory-traffic floor of every row -> speed_cuda.{csv,md,json}
#   tiles     benchmark_kernel_tiles.py: the fused kernels' tile sizes and warps, bf16 training at 32x32 and 32x512
#             -> kernel_tiles.csv
#   crf       benchmark_crf_share.py: the CRF's share of a NER training step -> crf_share.{csv,md}
#   compile   benchmark_speed.py: torch.compile and torch.compile(mode="reduce-overhead") over the fused step, bf16
#             training at 32x32 and 32x512 -> speed_cuda_compile.{csv,md,json} (not in the default STAGES: the
#             profile stage took its time within the budget; docs/benchmarks/speed_cuda_compile.md has its rows)
#   graphs    benchmark_epochs.py: a movie-review epoch with --torch_compile --torch_compile_mode reduce-overhead
#             (does it pay for a whole epoch?) -> epochs_graphs.{csv,md} (not in the default STAGES: wholestep times
#             the epochs of whole-step graphs, which replace compile's)
#   epochs    benchmark_epochs.py: one training epoch of movie review and CoNLL-2003 NER, S-LSTM vs BiLSTM, through
#             the training scripts, next to the paper's seconds -> epochs.{csv,md}, <run>.log (not in the default
#             STAGES: wholestep runs the same epochs, and those with --cuda_graphs)
#   scripts   the training scripts' tests on the GPU (not in the default STAGES: minutes)
#
#   bash run_scripts/benchmarks/gpu_checks.sh --prepare   # here, before: data and wheels into .gpu/ (git-ignored)
#   bash run_scripts/benchmarks/gpu_checks.sh OUTPUT_DIR  # there: everything under OUTPUT_DIR
#
# --prepare copies the CoNLL-2003 NER and movie-review data (SHARED_DATA, default ../shared/data) to .gpu/data and
# downloads the wheels of the packages a GPU machine's image may lack or hold too old (.gpu/whl; Python 3.12,
# manylinux x86-64); on the GPU machine the run installs them offline into /tmp/site first and reads the data from
# .gpu/data. Carry `.gpu` to the machine with the repository.
#
# Environment: STAGES (default "tests profile wholestep speed tiles crf"), BUDGET (seconds for the
# whole run, default 570), ARCHIVE (a .tar.gz that receives OUTPUT_DIR after every stage, for machines that return few
# files), T_<STAGE> (a stage's limit in seconds, e.g. T_SPEED=140), PYTEST_WORKERS (the scripts stage, pytest-xdist).
# A failing stage does not stop the later ones; the exit status says whether any failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-$(command -v python3 || command -v python)}  # CUDA images hold only python3
WHEELS=.gpu/whl
GPU_DATA=.gpu/data
# The packages to carry, pinned to the versions of this machine (the ones the tests ran with here).
CARRIED=(transformers regex datasets dill multiprocess seqeval)  # transformers checks regex's version at import

if [ "${1:-}" = "--prepare" ]; then
    set -e
    SHARED_DATA=${SHARED_DATA:-../shared/data}
    exclude=$(git rev-parse --git-path info/exclude)
    mkdir -p "$(dirname "$exclude")" "$WHEELS" "$GPU_DATA/conll2003"
    grep -qx '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >>"$exclude"
    cp -r "$SHARED_DATA/conll2003/ner" "$GPU_DATA/conll2003/"
    cp -r "$SHARED_DATA/movie_review" "$GPU_DATA/"
    for name in "${CARRIED[@]}"; do
        pinned="$name==$("$PYTHON" -c "from importlib.metadata import version; print(version('$name'))")"
        "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d "$WHEELS" "$pinned" 2>/dev/null ||
            "$PYTHON" -m pip wheel -q --no-deps -w "$WHEELS" "$pinned"  # seqeval has no wheel on PyPI
    done
    du -sh .gpu
    exit 0
fi

OUTPUT_DIR=${1:-${OUT:-/tmp}/gpu_checks}
mkdir -p "$OUTPUT_DIR"
STAGES=${STAGES:-tests profile wholestep speed tiles crf}
BUDGET=${BUDGET:-570}
started=$SECONDS
failed=0
if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$WHEELS"/*.whl || failed=1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1  # a lent GPU reaches no network: no waiting on the Hub
DATA=${SHARED_DATA:-$([ -d "$GPU_DATA" ] && echo "$GPU_DATA" || echo ../shared/data)}

pack() {  # OUTPUT_DIR into ARCHIVE, if asked for
    [ -z "${ARCHIVE:-}" ] || { tar -czf "$ARCHIVE.part" -C "$OUTPUT_DIR" . && mv "$ARCHIVE.part" "$ARCHIVE"; }
}
stage() {  # a name (its limit: T_<NAME>, else the default given second), then the command
    local name=$1 limit=$2
    shift 2
    case " $STAGES " in *" $name "*) ;; *) return ;; esac
    local override="T_${name^^}" left=$((BUDGET - (SECONDS - started)))
    limit=${!override:-$limit}
    ((limit > left)) && limit=$left
    if ((limit < 15)); then
        echo "== $(date -u +%T) $name: skipped, ${left} s of the ${BUDGET} s budget left"
        failed=1
        return
    fi
    echo "== $(date -u +%T) $name (at most $limit s)"
    timeout "$limit" "$@" || { echo "== $name failed: exit $?"; failed=1; }
    pack
}

SPEED=(run_scripts/benchmarks/benchmark_speed.py --device cuda --batch_sizes 32 --min_time 0.2 --repeats 3
       --max_repeats 10 --no_plots --output_dir "$OUTPUT_DIR")
echo "== $(date -u +%T) machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
"$PYTHON" -c "import torch, transformers, triton; print('torch', torch.__version__, 'CUDA', torch.version.cuda,
    'transformers', transformers.__version__, 'triton', triton.__version__, 'GPU', torch.cuda.get_device_name())" ||
    failed=1
# The model's CUDA tests first; the check that compiles the kernels without a GPU is for CPU machines (minutes here).
# The CRF kernels' tests take about 30 s on an H200; the fused step's compile a kernel per configuration they test.
stage tests 120 "$PYTHON" -m pytest -q -rs -p no:cacheprovider tests/model/test_cuda.py tests/model/test_crf_kernels.py \
    tests/model/test_fused_step.py tests/benchmarks/test_gpu_harness.py::test_cuda_graph_replay_matches_eager \
    -k "not compile_for_a_gpu"
stage profile 60 "$PYTHON" run_scripts/benchmarks/benchmark_kernel_profile.py --data_dir "$DATA" \
    --output_dir "$OUTPUT_DIR"
stage wholestep 150 "$PYTHON" run_scripts/benchmarks/benchmark_graph_step.py --data_dir "$DATA" \
    --output_dir "$OUTPUT_DIR" --run_timeout 45
stage speed 130 "$PYTHON" "${SPEED[@]}" --models slstm bilstm1 bilstm2 --lengths 16 32 64 128 512 \
    --variants fp32 bf16 --slstm_variants eager bf16+eager fused bf16+fused fused+graphs bf16+fused+graphs \
    --slstm_variant_lengths 16 32 64 128 512 --real_data conll2003-ner movie-review --data_dir "$DATA" \
    --real_batch_sizes 10 32 --real_batches 8 --name speed_cuda
stage tiles 60 "$PYTHON" run_scripts/benchmarks/benchmark_kernel_tiles.py --device cuda --output_dir "$OUTPUT_DIR" \
    --max_block_h 32 64 --num_warps 2 8
stage crf 30 "$PYTHON" run_scripts/benchmarks/benchmark_crf_share.py --device cuda --data_dir "$DATA" \
    --real_batches 8 --repeats 3 --min_time 0.2 --output_dir "$OUTPUT_DIR"
stage compile 50 "$PYTHON" "${SPEED[@]}" --models slstm bilstm1 --lengths 32 512 --modes train --variants bf16 \
    --slstm_variants bf16+compile bf16+fused+reduce-overhead --slstm_variant_lengths 32 512 --name speed_cuda_compile
stage graphs 50 "$PYTHON" run_scripts/benchmarks/benchmark_epochs.py --data_dir "$DATA" --run_timeout 60 \
    --runs movie-review-slstm+compile-graphs --output_dir "$OUTPUT_DIR" --name epochs_graphs
stage epochs 150 "$PYTHON" run_scripts/benchmarks/benchmark_epochs.py --data_dir "$DATA" --run_timeout 75 \
    --runs movie-review-slstm movie-review-bilstm1 ner-slstm ner-bilstm1 --output_dir "$OUTPUT_DIR"
stage scripts 300 "$PYTHON" -m pytest -q -rs -p no:cacheprovider ${PYTEST_WORKERS:+-n "$PYTEST_WORKERS"} \
    tests/scripts/test_run_ner.py tests/scripts/test_run_classification.py
echo "== $(date -u +%T) done in $((SECONDS - started)) s; a stage failed: $failed"
exit $failed
