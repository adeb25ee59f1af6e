"""Sentence-State LSTM (Zhang, Liu & Song, ACL 2018) for Hugging Face `transformers`.

Importing the package registers the models with the Auto classes, so an installed package loads checkpoints
without `trust_remote_code`; saved checkpoints also carry the code for `trust_remote_code=True`.
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from .configuration_baselines import BaselineEncoderConfig
from .configuration_slstm import SLSTMConfig
from .crf import ConditionalRandomField
from .modeling_baselines import (
    BaselineForSequenceClassification,
    BaselineForTokenClassification,
    BaselineModel,
    BaselinePreTrainedModel,
)
from .modeling_slstm import (
    SLSTMForSequenceClassification,
    SLSTMForTokenClassification,
    SLSTMModel,
    SLSTMPreTrainedModel,
)

for config_class, base, sequence_head, token_head in (
    (SLSTMConfig, SLSTMModel, SLSTMForSequenceClassification, SLSTMForTokenClassification),
    (BaselineEncoderConfig, BaselineModel, BaselineForSequenceClassification, BaselineForTokenClassification),
):
    AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
    AutoModel.register(config_class, base, exist_ok=True)
    AutoModelForSequenceClassification.register(config_class, sequence_head, exist_ok=True)
    AutoModelForTokenClassification.register(config_class, token_head, exist_ok=True)

__all__ = [
    "BaselineEncoderConfig",
    "BaselineForSequenceClassification",
    "BaselineForTokenClassification",
    "BaselineModel",
    "BaselinePreTrainedModel",
    "ConditionalRandomField",
    "SLSTMConfig",
    "SLSTMForSequenceClassification",
    "SLSTMForTokenClassification",
    "SLSTMModel",
    "SLSTMPreTrainedModel",
]
