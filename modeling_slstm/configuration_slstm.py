"""Configuration of the Sentence-State LSTM (S-LSTM; Zhang, Liu & Song, ACL 2018)."""

from transformers import AutoConfig, PreTrainedConfig
from transformers.configuration_utils import SubConfigSpec

from .cpu_threads import check_inference_threads
from .kernel_dispatch import STEP_IMPLEMENTATIONS
from .tag_schemes import BIOESLabelMap

GATE_NORMALIZATIONS = ("sigmoid_softmax", "softmax")
CHAR_PAD_ID = 0
"""The id of padding in `char_ids` (a character vocabulary's first entry): a zero, untrained embedding row."""
CLASSIFIER_POOLINGS = ("sentence", "attention", "mean")
INITIAL_STATES = ("learned", "input")
HEAD_TAG_SCHEMES = (None, "BIOES")
FEATURE_POOLINGS = ("mean", "first")
FEATURE_ENCODER_SUB_CONFIG = {
    # Any `AutoConfig` (its `model_type` decides the class); absent unless given, as for a model without features.
    "feature_encoder_config": SubConfigSpec(config_class=AutoConfig, model_type="bert", optional=True)
}
# Written into every saved config, so that any S-LSTM checkpoint loads with trust_remote_code through every Auto
# class, not only through the one of the class that saved it (which is all `save_pretrained` records by itself).
AUTO_MAP = {
    "AutoConfig": "configuration_slstm.SLSTMConfig",
    "AutoModel": "modeling_slstm.SLSTMModel",
    "AutoModelForSequenceClassification": "modeling_slstm.SLSTMForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_slstm.SLSTMForTokenClassification",
}


def word_representation_dim(config: PreTrainedConfig) -> int:
    """`config.embedding_dim`, plus `config.char_hidden_size` when `config.use_char_features`, plus the feature
    encoder's `hidden_size` when there is one: the width of the output of `SLSTMEmbeddings` (shared by every config
    that builds one)."""
    features = config.feature_encoder_config.hidden_size if config.feature_encoder_config is not None else 0
    return config.embedding_dim + (config.char_hidden_size if config.use_char_features else 0) + features


def validate_integers(config: PreTrainedConfig, minimums: dict[str, int]) -> None:
    """Checks that each field named in `minimums` is an integer (not a bool) at least its minimum; the message names
    the config class and field."""
    for field, minimum in minimums.items():
        value = getattr(config, field)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ValueError(f"{type(config).__name__}.{field} must be an integer >= {minimum}, got {value!r}")


def validate_bools(config: PreTrainedConfig, fields: tuple[str, ...]) -> None:
    """Checks that each named switch is a bool (a JSON `"false"` string would otherwise read as true)."""
    for field in fields:
        value = getattr(config, field)
        if type(value) is not bool:
            raise ValueError(f"{type(config).__name__}.{field} must be a bool, got {value!r}")


def validate_dropouts(config: PreTrainedConfig, fields: tuple[str, ...]) -> None:
    """Checks that each named dropout probability lies in [0, 1)."""
    for field in fields:
        value = getattr(config, field)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value < 1.0:
            raise ValueError(f"{type(config).__name__}.{field} must be in [0, 1), got {value!r}")


def validate_char_settings(config: PreTrainedConfig) -> None:
    """Checks the character-feature fields of a config that builds `SLSTMEmbeddings`, with messages that name the
    config class and field."""
    name = type(config).__name__
    validate_bools(config, ("use_char_features",))
    validate_integers(
        config, {"char_vocab_size": 2, "char_embedding_dim": 1, "char_hidden_size": 1, "char_kernel_size": 1}
    )
    if config.char_kernel_size % 2 == 0:
        # An even window has no centre: with `padding=k // 2` its outputs would not line up with the characters.
        raise ValueError(f"{name}.char_kernel_size must be odd, got {config.char_kernel_size}")
    validate_dropouts(config, ("char_dropout",))


def validate_feature_settings(config: PreTrainedConfig) -> None:
    """Checks the feature-encoder fields of a config that builds `SLSTMEmbeddings`, naming the config class and
    field."""
    name = type(config).__name__
    if config.feature_pooling not in FEATURE_POOLINGS:
        raise ValueError(f"{name}.feature_pooling must be one of {FEATURE_POOLINGS}, got {config.feature_pooling!r}")
    layers = config.feature_encoder_trainable_layers
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < -1:
        raise ValueError(
            f"{name}.feature_encoder_trainable_layers must be -1 (all), 0 (frozen) or a number of top layers, "
            f"got {layers!r}"
        )
    encoder = config.feature_encoder_config
    if encoder is None:
        return
    for field in ("hidden_size", "num_hidden_layers"):
        if not isinstance(getattr(encoder, field, None), int):
            raise TypeError(
                f"{name}.feature_encoder_config must be the config of a text encoder with an integer {field} (as "
                f"BERT's), got a {type(encoder).__name__} without one"
            )
    if layers > encoder.num_hidden_layers:
        raise ValueError(
            f"{name}.feature_encoder_trainable_layers ({layers}) exceeds the feature encoder's "
            f"num_hidden_layers ({encoder.num_hidden_layers})"
        )


def validate_head_tag_scheme(config: PreTrainedConfig) -> None:
    """Checks `head_tag_scheme` and the CRF switches of a config that builds a token classifier, naming the config
    class."""
    validate_bools(config, ("use_crf", "crf_constraints"))
    if config.head_tag_scheme not in HEAD_TAG_SCHEMES:
        raise ValueError(
            f"{type(config).__name__}.head_tag_scheme must be None (the head scores id2label's labels) or 'BIOES', "
            f"got {config.head_tag_scheme!r}"
        )


def check_bioes_head_labels(config: PreTrainedConfig, labels: list[str]) -> None:
    """Refuses labels that a BIOES head (`head_tag_scheme="BIOES"`) cannot present, when they are set on the config
    (not at the first training step): IOB2 entity labels, every type with `B-` and `I-`. The placeholders `LABEL_i`
    of a config built from `num_labels` alone pass: the real labels come later."""
    if getattr(config, "head_tag_scheme", None) != "BIOES" or labels == [f"LABEL_{i}" for i in range(len(labels))]:
        return
    try:
        BIOESLabelMap(labels)
    except ValueError as error:
        raise ValueError(
            f"{error}. A head_tag_scheme='BIOES' checkpoint tags entities (span labels such as PER/LOC); to train it "
            "on other labels (e.g. POS tags), load it without the BIOES head, e.g. "
            "`AutoConfig.from_pretrained(path, head_tag_scheme=None, num_labels=N)` with `ignore_mismatched_sizes=True` "
            "(a new head for the new labels), or train a fresh model (run_scripts/run_ner.py without --tag_scheme bioes)"
        ) from None


class SLSTMConfig(PreTrainedConfig):
    r"""
    Configuration of an S-LSTM encoder and its task heads. Defaults follow the paper's NER/classification
    setting (hidden 300, 9 recurrent steps, window 1, one sentence node, embedding dropout 0.5).

    Args:
        vocab_size (`int`, *optional*, defaults to 30000):
            Number of rows of the word embedding matrix.
        embedding_dim (`int`, *optional*, defaults to 300):
            Width of the word embedding (of `inputs_embeds`, and of pretrained vectors copied into it). The word
            representation `x_i` is this embedding, followed by the character features when `use_char_features`.
        hidden_size (`int`, *optional*, defaults to 300):
            Width `H` of every word state `h_i`, sentence state `g` and cell. May differ from `embedding_dim`: the
            input term `U x_i` maps `x_i` (of width `word_representation_dim`) to the gates of width `H`, so it is
            itself the input projection and no extra layer is added in front of it.
        num_steps (`int`, *optional*, defaults to 9):
            Number of recurrent state transitions `T` (paper: 9 for classification and NER, 7 for POS).
        window_size (`int`, *optional*, defaults to 1):
            Neighbours `w` on each side that a word node reads at every step (paper: 1).
        num_sentence_nodes (`int`, *optional*, defaults to 1):
            Number of sentence-level nodes `K`. 0 removes global exchange; with more than one, each sentence node's
            gates read all sentence states (the paper's "dummy nodes" that exchange information with each other).
        initial_state (`str`, *optional*, defaults to `"learned"`):
            The states before the first step. `"learned"` (the paper's): `h_i^0 = g^0 = h^0`, one learned vector, with
            every cell at zero. `"input"` (the authors' released classification code): `h_i^0 = c_i^0 = P x_i` and
            `g^0 = c_g^0` their mean over the real positions, where `P` is a learned linear map when
            `word_representation_dim != hidden_size` and the identity otherwise. With `"learned"` the sentence cell
            after step 1 is zero for every input (it mixes zero cells), so step 1 carries no global information.
        gate_normalization (`str`, *optional*, defaults to `"sigmoid_softmax"`):
            How the cell gates are normalised to sum to one: `"sigmoid_softmax"` applies the softmax to sigmoid
            outputs as the paper and its code do; `"softmax"` applies it to the raw pre-activations.
        context_independent_content (`bool`, *optional*, defaults to `False`):
            "LSTM - S-RNN" simplification of Levy et al. (2018): the content `u_i = U_u x_i + b_u` is a linear,
            context-independent function of the word, so only the gates see the context.
        remove_output_gate (`bool`, *optional*, defaults to `False`):
            "LSTM - output gate" simplification of Levy et al. (2018): `h = tanh(c)` for word and sentence nodes.
        embedding_dropout (`float`, *optional*, defaults to 0.5):
            Dropout on the word representations `x_i` (the paper's only dropout), character features included.
        use_char_features (`bool`, *optional*, defaults to `False`):
            Append character-level features of every word to its embedding (a character CNN, see
            `SLSTMCharCNN` in `modeling_slstm.py`): the models then need the `char_ids` that [`SLSTMTokenizer`]
            returns. They give out-of-vocabulary words a representation of their own, and give casing back to a
            model whose word vectors are lower-cased.
        char_vocab_size (`int`, *optional*, defaults to 100):
            Rows of the character embedding: the tokenizer's `char_vocab_size` (0 = padding, 1 = unknown character).
        char_embedding_dim (`int`, *optional*, defaults to 30):
            Width of the character embeddings (Ma & Hovy, 2016: 30).
        char_hidden_size (`int`, *optional*, defaults to 30):
            Number of convolution filters, the width of a word's character features (Ma & Hovy, 2016: 30).
        char_kernel_size (`int`, *optional*, defaults to 3):
            Width of the convolution window over characters (odd; Ma & Hovy, 2016: 3).
        char_dropout (`float`, *optional*, defaults to 0.5):
            Dropout on the character embeddings before the convolution (Ma & Hovy, 2016: 0.5).
        feature_encoder_config (`dict` or `PreTrainedConfig`, *optional*):
            The config of a pretrained subword encoder (any `AutoModel`, e.g. a BERT) whose states, pooled per word
            (`feature_pooling`), are appended to every `x_i` after the word embedding and character features. The
            models then need the `subword_ids`, `subword_attention_mask` and `subword_to_word` that an
            [`SLSTMTokenizer`] built with a `subword_tokenizer` returns. The encoder's weights are part of the
            checkpoint; a fresh model gets them with
            `model.base_model.embeddings.subword_features.load_pretrained_encoder(path)`.
        feature_pooling (`str`, *optional*, defaults to `"mean"`):
            How a word's subword states become one vector: `"mean"` (of all its subwords) or `"first"` (its first
            subword's state, the usual choice when fine-tuning BERT for tagging). `"mean"` by default because the
            encoder is frozen by default: a frozen encoder was not trained to gather a word's meaning into its first
            piece, and the mean keeps what every piece holds.
        feature_encoder_trainable_layers (`int`, *optional*, defaults to 0):
            0 keeps the feature encoder frozen (and in evaluation mode, so its features are the same in training and
            evaluation); `k > 0` trains its top `k` layers; -1 trains all of it, embeddings included (not its pooler,
            which the features do not read).
        hidden_dropout (`float`, *optional*, defaults to 0.0):
            Dropout on the word and sentence states read by the next step.
        classifier_dropout (`float`, *optional*, defaults to 0.0):
            Dropout on the features entering a task head's output layer.
        classifier_pooling (`str`, *optional*, defaults to `"sentence"`):
            Sentence representation for sequence classification: `"sentence"` (the encoder's `pooler_output`: the first
            sentence node's final state `g`, or the masked mean of word states when there is no sentence node),
            `"attention"` (the paper's additive attention over the word states) or `"mean"` (masked mean).
        use_crf (`bool`, *optional*, defaults to `False`):
            Token classification with a linear-chain CRF instead of a per-token softmax.
        crf_constraints (`bool`, *optional*, defaults to `True`):
            Forbid transitions that are invalid in the BIO/IOB2 or BIOES scheme of `id2label` (e.g. `O -> I-PER`).
            Has no effect when the labels follow neither scheme.
        head_tag_scheme (`str`, *optional*, defaults to `None`):
            `"BIOES"`: the token classifier trains and decodes in BIOES (the paper's NER setting: tags that mark
            where an entity ends) while `id2label` holds IOB2 labels, which is what the model presents: its `logits`
            score the IOB2 labels, so `pipeline("token-classification")` groups entities correctly. `None`: the head
            scores `id2label`'s labels directly.
        step_implementation (`str`, *optional*, defaults to `"auto"`):
            Which code runs the recurrent step (the same equations either way): `"eager"` the readable PyTorch step;
            `"triton"` the fused Triton kernels of `triton_step.py` (an error where they cannot run: without Triton,
            without a CUDA GPU unless `TRITON_INTERPRET=1`, with `context_independent_content` or
            `remove_output_gate`, or in float64); `"auto"` the kernels when the tensors are on a CUDA GPU and they can
            run there, the readable step otherwise. A CRF head follows the same choice between its plain loops and
            its Triton kernels (`triton_crf.py`). Can be changed on a built model (`model.config`).
        inference_threads (`str` or `int`, *optional*, defaults to `"auto"`):
            PyTorch's intra-op threads while a model runs inference on the CPU (a forward outside autograd-enabled
            training, not traced by `torch.compile`); the caller's count is given back afterwards. `"auto"`: as many
            as there are idle usable cores, measured again at most every 2 s from `/proc/stat` (never more than
            PyTorch's default), unless the caller chose a count (`torch.set_num_threads` to other than the default,
            or `OMP_NUM_THREADS`), which is kept; on a machine where other jobs run this is several times faster
            than PyTorch's default (`cpu_threads.py`). `"torch"`: PyTorch's count as it is. A number: that many
            threads. Can be changed on a built model (`model.config`) or given to `from_pretrained`.
        initializer_range (`float`, *optional*, defaults to 0.1):
            Standard deviation of the normal initialisation of the word embeddings.
        pad_token_id (`int`, *optional*, defaults to 0), bos_token_id (`int`, *optional*, defaults to 2),
        eos_token_id (`int`, *optional*, defaults to 3):
            Special token ids of the word-level tokenizer (`<pad>`, `<s>`, `</s>`). The CRF decodes neither of them.

    Example:

    ```python
    >>> from modeling_slstm import SLSTMConfig, SLSTMModel

    >>> config = SLSTMConfig(vocab_size=1000, hidden_size=64, embedding_dim=32, num_steps=4)
    >>> model = SLSTMModel(config)
    ```
    """

    model_type = "sentence_state_lstm"
    sub_configs_defaults = FEATURE_ENCODER_SUB_CONFIG

    def __init__(
        self,
        vocab_size: int = 30000,
        embedding_dim: int = 300,
        hidden_size: int = 300,
        num_steps: int = 9,
        window_size: int = 1,
        num_sentence_nodes: int = 1,
        initial_state: str = "learned",
        gate_normalization: str = "sigmoid_softmax",
        context_independent_content: bool = False,
        remove_output_gate: bool = False,
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
        self.vocab_size = vocab_size
        self.embedding_dim = embedding_dim
        self.hidden_size = hidden_size
        self.num_steps = num_steps
        self.window_size = window_size
        self.num_sentence_nodes = num_sentence_nodes
        self.initial_state = initial_state
        self.gate_normalization = gate_normalization
        self.context_independent_content = context_independent_content
        self.remove_output_gate = remove_output_gate
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
        kwargs.setdefault("auto_map", dict(AUTO_MAP))
        super().__init__(**kwargs)
        self._validate_slstm_settings()
        validate_char_settings(self)
        validate_feature_settings(self)
        validate_head_tag_scheme(self)

    def __setattr__(self, key, value):
        # transformers' run_ner.py sets `config.label2id` and `config.id2label` on a model built for `num_labels`.
        if key == "id2label" and value is not None:
            check_bioes_head_labels(self, [value[index] for index in sorted(value, key=int)])
        elif key == "label2id" and value is not None:
            check_bioes_head_labels(self, sorted(value, key=lambda label: int(value[label])))
        elif key == "inference_threads":
            check_inference_threads(value, type(self).__name__)
        super().__setattr__(key, value)

    @property
    def word_representation_dim(self) -> int:
        """Width of the word representation `x_i` the recurrence reads: `embedding_dim`, plus `char_hidden_size`
        with character features, plus the feature encoder's `hidden_size` with encoder features."""
        return word_representation_dim(self)

    def _validate_slstm_settings(self):
        validate_integers(
            self,
            {"vocab_size": 1, "embedding_dim": 1, "hidden_size": 1, "num_steps": 1, "window_size": 1,
             "num_sentence_nodes": 0},
        )  # fmt: skip
        validate_dropouts(self, ("embedding_dropout", "hidden_dropout", "classifier_dropout"))
        validate_bools(self, ("context_independent_content", "remove_output_gate"))
        if self.gate_normalization not in GATE_NORMALIZATIONS:
            raise ValueError(
                f"SLSTMConfig.gate_normalization must be one of {GATE_NORMALIZATIONS}, got {self.gate_normalization!r}"
            )
        if self.initial_state not in INITIAL_STATES:
            raise ValueError(f"SLSTMConfig.initial_state must be one of {INITIAL_STATES}, got {self.initial_state!r}")
        if self.step_implementation not in STEP_IMPLEMENTATIONS:
            raise ValueError(
                f"SLSTMConfig.step_implementation must be one of {STEP_IMPLEMENTATIONS}, got {self.step_implementation!r}"
            )
        if self.classifier_pooling not in CLASSIFIER_POOLINGS:
            raise ValueError(
                f"SLSTMConfig.classifier_pooling must be one of {CLASSIFIER_POOLINGS}, got {self.classifier_pooling!r}"
            )


__all__ = [
    "CHAR_PAD_ID",
    "FEATURE_ENCODER_SUB_CONFIG",
    "STEP_IMPLEMENTATIONS",
    "SLSTMConfig",
    "validate_char_settings",
    "validate_dropouts",
    "validate_feature_settings",
    "validate_head_tag_scheme",
    "validate_integers",
    "word_representation_dim",
]
