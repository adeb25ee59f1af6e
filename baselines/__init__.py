"""Baseline encoders the S-LSTM paper compares with (BiLSTM, stacked CNN, Transformer), for benchmarks and the run
scripts. Not part of the S-LSTM model code: importing this package registers them with the Auto classes, and their
checkpoints load where this package is installed."""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from .configuration_baselines import BaselineEncoderConfig
from .modeling_baselines import (
    BaselineForSequenceClassification,
    BaselineForTokenClassification,
    BaselineModel,
    BaselinePreTrainedModel,
)

AutoConfig.register(BaselineEncoderConfig.model_type, BaselineEncoderConfig, exist_ok=True)
AutoModel.register(BaselineEncoderConfig, BaselineModel, exist_ok=True)
AutoModelForSequenceClassification.register(BaselineEncoderConfig, BaselineForSequenceClassification, exist_ok=True)
AutoModelForTokenClassification.register(BaselineEncoderConfig, BaselineForTokenClassification, exist_ok=True)

__all__ = [
    "BaselineEncoderConfig",
    "BaselineForSequenceClassification",
    "BaselineForTokenClassification",
    "BaselineModel",
    "BaselinePreTrainedModel",
]
