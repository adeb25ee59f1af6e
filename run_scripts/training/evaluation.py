"""What the Trainer keeps of a model's outputs for evaluation and prediction, shared by both training scripts."""

import numpy as np
import torch


def predicted_ids(logits, labels=None) -> np.ndarray | torch.Tensor:
    """The predicted id of each example (classification, logits `(examples, classes)`) or position (tagging, logits
    `(examples, positions, tags)`): the argmax of the last axis; a tuple's first element is the logits. As the
    Trainer's `preprocess_logits_for_metrics` (which also passes the `labels`), it keeps only these ids, not the
    logits, across evaluation batches. CRF logits are max-marginals, whose argmax is the Viterbi path."""
    if isinstance(logits, tuple):
        logits = logits[0]
    return logits.argmax(-1)
