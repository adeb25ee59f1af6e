"""Sentence-State LSTM (Zhang, Liu & Song, ACL 2018) for Hugging Face `transformers`.

Importing the package registers the models and the tokenizer with the Auto classes, so an installed package loads
checkpoints without `trust_remote_code`; saved checkpoints also carry the code for `trust_remote_code=True`.
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from .configuration_slstm import SLSTMConfig
from .crf import ConditionalRandomField
from .modeling_slstm import (
    SLSTMForSequenceClassification,
    SLSTMForTokenClassification,
    SLSTMModel,
    SLSTMPreTrainedModel,
)
from .tokenization_slstm import SLSTMTokenizer  # registers the tokenizer with AutoTokenizer
from .weighted_sum import weighted_sum_decomposition

AutoConfig.register(SLSTMConfig.model_type, SLSTMConfig, exist_ok=True)
AutoModel.register(SLSTMConfig, SLSTMModel, exist_ok=True)
AutoModelForSequenceClassification.register(SLSTMConfig, SLSTMForSequenceClassification, exist_ok=True)
AutoModelForTokenClassification.register(SLSTMConfig, SLSTMForTokenClassification, exist_ok=True)

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
