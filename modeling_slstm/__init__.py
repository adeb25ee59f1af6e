"""Sentence-State LSTM (Zhang, Liu & Song, ACL 2018) for Hugging Face `transformers`.

Importing the package registers the models and the tokenizer with the Auto classes, so an installed package loads
checkpoints without `trust_remote_code`; saved checkpoints also carry the code for `trust_remote_code=True`.
"""

import transformers
from transformers import AutoConfig

from .configuration_slstm import SLSTMConfig
from .crf import ConditionalRandomField
from .modeling_slstm import (
    AUTO_CLASSES,
    SLSTMForSequenceClassification,
    SLSTMForTokenClassification,
    SLSTMModel,
    SLSTMPreTrainedModel,
)
from .tokenization_slstm import SLSTMTokenizer  # registers the tokenizer with AutoTokenizer
from .weighted_sum import weighted_sum_decomposition

AutoConfig.register(SLSTMConfig.model_type, SLSTMConfig, exist_ok=True)
for auto_class_name, model_class in AUTO_CLASSES.items():
    getattr(transformers, auto_class_name).register(SLSTMConfig, model_class, exist_ok=True)

__all__ = [
    "ConditionalRandomField",
    "SLSTMConfig",
    "SLSTMForSequenceClassification",
    "SLSTMForTokenClassification",
    "SLSTMModel",
    "SLSTMPreTrainedModel",
    "SLSTMTokenizer",
    "weighted_sum_decomposition",
]
