"""Configuration of the baseline encoders the S-LSTM paper compares with (BiLSTM, stacked CNN, Transformer)."""

from transformers import PreTrainedConfig

from modeling_slstm.configuration_slstm import (
    CLASSIFIER_POOLINGS,
    FEATURE_ENCODER_SUB_CONFIG,
    STEP_IMPLEMENTATIONS,
    validate_char_settings,
    validate_dropouts,
    validate_feature_settings,
    validate_head_tag_scheme,
    validate_integers,
    word_representation_dim,
)
from modeling_slstm.cpu_threads import check_inference_threads

BASELINE_ENCODER_TYPES = ("bilstm", "cnn", "transformer", "feed_forward")
BASELINE_POSITION_EMBEDDINGS = ("sinusoidal", "learned")


class BaselineEncoderConfig(PreTrainedConfig):
    r"""
    Configuration of a baseline encoder and its task heads. The task models run the S-LSTM task models, so a baseline
    and an S-LSTM model with the same head fields are trained and evaluated the same way; only the encoder differs.

    Args:
        encoder_type (`str`, *optional*, defaults to `"bilstm"`):
            `"bilstm"` (stacked bidirectional `torch.nn.LSTM`, `hidden_size // 2` per direction, packed sequences),
            `"cnn"` (stacked 1-d convolutions with ReLU, padding zeroed before every convolution) or
            `"transformer"` (`torch.nn.TransformerEncoder` with a key-padding mask) or `"feed_forward"` (position-wise
            ReLU layers, no sequence model: with `feature_encoder_config`, the MLP head over a pretrained encoder).
        num_layers (`int`, *optional*, defaults to 1):
            Stacked layers (LSTM layers, convolution layers, Transformer layers or feed-forward layers).
        vocab_size (`int`, *optional*, defaults to 30000), embedding_dim (`int`, *optional*, defaults to 300):
            Word embedding matrix, as for S-LSTM.
        hidden_size (`int`, *optional*, defaults to 300):
            Width of the encoder's outputs (what the heads read). For a BiLSTM it must be even: each direction has
            `hidden_size // 2` units and their outputs are concatenated, as in the paper's BiLSTM baselines.
        embedding_dropout (`float`, *optional*, defaults to 0.5):
            Dropout on the word representations (as S-LSTM's `embedding_dropout`).
        use_char_features (`bool`, *optional*, defaults to `False`), char_vocab_size (`int`, *optional*, defaults to
        100), char_embedding_dim (`int`, *optional*, defaults to 30), char_hidden_size (`int`, *optional*, defaults
        to 30), char_kernel_size (`int`, *optional*, defaults to 3), char_dropout (`float`, *optional*, defaults to
        0.5):
            Character features appended to the word embeddings, with the same meaning as in [`SLSTMConfig`]: the
            baselines read the same word representations as S-LSTM, so that comparisons stay fair.
        feature_encoder_config (`dict` or `PreTrainedConfig`, *optional*), feature_pooling (`str`, *optional*,
        defaults to `"mean"`), feature_encoder_trainable_layers (`int`, *optional*, defaults to 0):
            A pretrained subword encoder's states pooled per word and appended to the word representations, with the
            same meaning as in [`SLSTMConfig`].
        hidden_dropout (`float`, *optional*, defaults to 0.0):
            Dropout between stacked layers (BiLSTM, CNN) or inside the Transformer layers.
        kernel_size (`int`, *optional*, defaults to 3):
            CNN kernel width (odd, so that outputs stay aligned with the words).
        num_attention_heads (`int`, *optional*, defaults to 6):
            Transformer heads; must divide `hidden_size`.
        intermediate_size (`int`, *optional*):
            Transformer feed-forward width; defaults to `2 * hidden_size`.
        position_embedding_type (`str`, *optional*, defaults to `"sinusoidal"`):
            Transformer positions: fixed `"sinusoidal"` or `"learned"` (`max_position_embeddings` rows).
        max_position_embeddings (`int`, *optional*, defaults to 1024):
            Longest input for learned positions.
        classifier_dropout, classifier_pooling, use_crf, crf_constraints, head_tag_scheme, step_implementation,
        inference_threads, initializer_range, pad_token_id, bos_token_id, eos_token_id: the head and embedding fields
            and the CPU inference threads, with the same meaning and defaults as [`SLSTMConfig`] (so that a speed
            comparison runs both kinds of model on the same threads; `step_implementation` chooses the CRF's plain
            loops or its Triton kernels; the encoders here have no S-LSTM step). `classifier_pooling="sentence"` reads
            the encoder's `pooler_output`: for a BiLSTM the final forward state concatenated with the final backward
            state; for a CNN or a Transformer the masked mean of the outputs (they have no sentence state).

    Example:

    ```python
    >>> from baselines import BaselineEncoderConfig, BaselineModel

    >>> config = BaselineEncoderConfig(encoder_type="bilstm", num_layers=2, vocab_size=1000, hidden_size=64)
    >>> model = BaselineModel(config)
    ```
    """

    model_type = "slstm_baseline_encoder"
    sub_configs_defaults = FEATURE_ENCODER_SUB_CONFIG

    def __init__(
        self,
        encoder_type: str = "bilstm",
        num_layers: int = 1,
        vocab_size: int = 30000,
        embedding_dim: int = 300,
        hidden_size: int = 300,
        embedding_dropout: float = 0.5,
        use_char_features: bool = False,
        char_vocab_size: int = 100,
        char_embedding_dim: int = 30,
        char_hidden_size: int = 30,
        char_kernel_size: int = 3,
        char_dropout: float = 0.5,
        feature_encoder_config: dict | PreTrainedConfig | None = None,
        feature_pooling: str = "mean",
        feature_encoder_trainable_layers: int = 0,
        hidden_dropout: float = 0.0,
        kernel_size: int = 3,
        num_attention_heads: int = 6,
        intermediate_size: int | None = None,
        position_embedding_type: str = "sinusoidal",
        max_position_embeddings: int = 1024,
        classifier_dropout: float = 0.0,
        classifier_pooling: str = "sentence",
        use_crf: bool = False,
        crf_constraints: bool = True,
        head_tag_scheme: str | None = None,
        step_implementation: str = "auto",
        inference_threads: str | int = "auto",
        initializer_range: float = 0.1,
        pad_token_id: int = 0,
        bos_token_id: int = 2,
        eos_token_id: int = 3,
        **kwargs,
    ):
        self.encoder_type = encoder_type
        self.num_layers = num_layers
        self.vocab_size = vocab_size
        self.embedding_dim = embedding_dim
        self.hidden_size = hidden_size
        self.embedding_dropout = embedding_dropout
        self.use_char_features = use_char_features
        self.char_vocab_size = char_vocab_size
        self.char_embedding_dim = char_embedding_dim
        self.char_hidden_size = char_hidden_size
        self.char_kernel_size = char_kernel_size
        self.char_dropout = char_dropout
        self.feature_encoder_config = feature_encoder_config  # made a config by `PreTrainedConfig.__post_init__`
        self.feature_pooling = feature_pooling
        self.feature_encoder_trainable_layers = feature_encoder_trainable_layers
        self.hidden_dropout = hidden_dropout
        self.kernel_size = kernel_size
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size if intermediate_size is not None else 2 * hidden_size
        self.position_embedding_type = position_embedding_type
        self.max_position_embeddings = max_position_embeddings
        self.classifier_dropout = classifier_dropout
        self.classifier_pooling = classifier_pooling
        self.use_crf = use_crf
        self.crf_constraints = crf_constraints
        self.head_tag_scheme = head_tag_scheme
        self.step_implementation = step_implementation
        self.inference_threads = inference_threads
        self.initializer_range = initializer_range
        self.pad_token_id = pad_token_id
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id
        super().__init__(**kwargs)
        self._validate_baseline_settings()
        validate_char_settings(self)
        validate_feature_settings(self)
        validate_head_tag_scheme(self)

    def __setattr__(self, key, value):
        # Checked as set, also on a built model: every CPU inference call reads it.
        if key == "inference_threads":
            check_inference_threads(value, type(self).__name__)
        super().__setattr__(key, value)

    @property
    def word_representation_dim(self) -> int:
        """Width of the word representations the encoder reads: `embedding_dim`, plus `char_hidden_size` with
        character features, plus the feature encoder's `hidden_size` with encoder features."""
        return word_representation_dim(self)

    def _validate_baseline_settings(self):
        if self.encoder_type not in BASELINE_ENCODER_TYPES:
            raise ValueError(
                f"BaselineEncoderConfig.encoder_type must be one of {BASELINE_ENCODER_TYPES}, got {self.encoder_type!r}"
            )
        positive = ("num_layers", "vocab_size", "embedding_dim", "hidden_size", "kernel_size", "num_attention_heads",
                    "intermediate_size", "max_position_embeddings")  # fmt: skip
        validate_integers(self, dict.fromkeys(positive, 1))
        validate_dropouts(self, ("embedding_dropout", "hidden_dropout", "classifier_dropout"))
        if self.encoder_type == "bilstm" and self.hidden_size % 2:
            raise ValueError(
                f"A BiLSTM splits hidden_size between its two directions: it must be even, got {self.hidden_size}"
            )
        if self.step_implementation not in STEP_IMPLEMENTATIONS:
            raise ValueError(
                f"BaselineEncoderConfig.step_implementation must be one of {STEP_IMPLEMENTATIONS}, got "
                f"{self.step_implementation!r}"
            )
        if self.encoder_type == "cnn" and self.kernel_size % 2 == 0:
            raise ValueError(f"BaselineEncoderConfig.kernel_size must be odd, got {self.kernel_size}")
        if self.encoder_type == "transformer" and self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must divide hidden_size ({self.hidden_size})"
            )
        if self.position_embedding_type not in BASELINE_POSITION_EMBEDDINGS:
            raise ValueError(
                f"BaselineEncoderConfig.position_embedding_type must be one of {BASELINE_POSITION_EMBEDDINGS}, "
                f"got {self.position_embedding_type!r}"
            )
        if self.classifier_pooling not in CLASSIFIER_POOLINGS:
            raise ValueError(
                f"BaselineEncoderConfig.classifier_pooling must be one of {CLASSIFIER_POOLINGS}, "
                f"got {self.classifier_pooling!r}"
            )


__all__ = ["BaselineEncoderConfig"]
