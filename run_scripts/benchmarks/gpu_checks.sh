#!/usr/bin/env bash
# The checks of the package on a CUDA GPU, most important first: the model's CUDA tests (the same losses, outputs and
# gradients as on the CPU, padding, bf16, Trainer, pipeline), the training scripts' tests (their Trainer runs on the
# GPU there), then the speed tables of docs/benchmarks.md's GPU section (S-LSTM against the plain reference and the
# baselines, float32 and bf16 autocast, forward and training; then torch.compile at 32 x 512).
#
#   bash run_scripts/benchmarks/gpu_checks.sh [OUTPUT_DIR]   # the speed tables go to OUTPUT_DIR (docs/benchmarks)
#
# PYTEST_WORKERS=N runs the scripts' tests in N processes (needs pytest-xdist); STAGE_TIMEOUT=S stops a stage after S
# seconds (a lent GPU is timed). A failing stage does not stop the later ones; the exit status says whether any failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUTPUT_DIR=${1:-docs/benchmarks}
PYTHON=${PYTHON:-$(command -v python || command -v python3)}  # images with only python3 (CUDA images) too
failed=0
stage() {  # a title, then the command
    echo "== $(date -u +%T) $1"
    shift
    timeout "${STAGE_TIMEOUT:-0}" "$@" || { echo "== stage failed: exit $?"; failed=1; }
}

stage "machine" nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
stage "versions" "$PYTHON" -c "import torch, transformers; print('torch', torch.__version__, 'CUDA', torch.version.cuda,
    'transformers', transformers.__version__, 'GPU', torch.cuda.get_device_name())"
stage "model on the GPU" "$PYTHON" -m pytest -q -rs tests/model/test_cuda.py
stage "training scripts on the GPU" "$PYTHON" -m pytest -q -rs ${PYTEST_WORKERS:+-n "$PYTEST_WORKERS"} \
    tests/scripts/test_run_ner.py tests/scripts/test_run_classification.py tests/scripts/test_run_encoder_features.py
stage "speed" "$PYTHON" run_scripts/benchmarks/benchmark_speed.py --device cuda \
    --models slstm slstm-reference bilstm1 bilstm2 cnn3 transformer5 --batch_sizes 32 --lengths 32 128 512 \
    --variants fp32 bf16 --slstm_variants --min_time 0.3 --no_plots --output_dir "$OUTPUT_DIR" --name speed_cuda
stage "speed with torch.compile" "$PYTHON" run_scripts/benchmarks/benchmark_speed.py --device cuda \
    --models slstm bilstm1 --batch_sizes 32 --lengths 512 --variants fp32 bf16 --slstm_variants compile \
    bf16+compile --slstm_variant_lengths 512 --min_time 0.3 --no_plots --output_dir "$OUTPUT_DIR" \
    --name speed_cuda_compile
exit $failed
