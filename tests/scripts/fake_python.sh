#!/usr/bin/env bash
# Stands in for the interpreter in test_paper_runs.py: appends its arguments to $RECORD (and its OMP_NUM_THREADS to
# $RECORD.threads) and finishes the run as a training script would, writing the results files of the splits it was
# asked for (dev score 0.5, test score 0.25, 4 epochs in 100 s).
echo "$@" >> "$RECORD"
echo "$OMP_NUM_THREADS" >> "$RECORD.threads"  # the thread count the run was given
while [ $# -gt 0 ]; do
    case $1 in --output_dir) output=$2 ;; --do_predict) test=', "test_accuracy": 0.25, "test_f1": 0.25' ;; esac
    shift
done
mkdir -p "$output"
echo "{\"eval_accuracy\": 0.5, \"eval_f1\": 0.5, \"epoch\": 4, \"train_runtime\": 100.0$test}" > "$output/all_results.json"
echo '{}' > "$output/eval_results.json"
[ -n "$test" ] && echo '{}' > "$output/test_results.json"
exit 0
