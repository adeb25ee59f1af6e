"""Configuration of the Sentence-State LSTM (S-LSTM; Zhang, Liu & Song, ACL 2018)."""

from transformers import PreTrainedConfig

GATE_NORMALIZATIONS = ("sigmoid_softmax", "softmax")
CLASSIFIER_POOLINGS = ("sentence", "attention", "mean")
# Written into every saved config, so that any S-LSTM checkpoint loads with trust_remote_code through every Auto
# class, not only through the one of the class that saved it (which is all `save_pretrained` records by itself).
AUTO_MAP = {
    "AutoConfig": "configuration_slstm.SLSTMConfig",
    "AutoModel": "modeling_slstm.SLSTMModel",
    "AutoModelForSequenceClassification": "modeling_slstm.SLSTMForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_slstm.SLSTMForTokenClassification",
}


class SLSTMConfig(PreTrainedConfig):
    r"""
    Configuration of an S-LSTM encoder and its task heads. Defaults follow the paper's NER/classification
    setting (hidden 300, 9 recurrent steps, window 1, one sentence node, embedding dropout 0.5).

    Args:
        vocab_size (`int`, *optional*, defaults to 30000):
            Number of rows of the word embedding matrix.
        embedding_dim (`int`, *optional*, defaults to 300):
            Width of the word representation `x_i`.
        hidden_size (`int`, *optional*, defaults to 300):
            Width `H` of every word state `h_i`, sentence state `g` and cell. May differ from `embedding_dim`: the
            input term `U x_i` maps `embedding_dim` to the gates of width `H`, so it is itself the input projection
            and no extra layer is added in front of it.
        num_steps (`int`, *optional*, defaults to 9):
            Number of recurrent state transitions `T` (paper: 9 for classification and NER, 7 for POS).
        window_size (`int`, *optional*, defaults to 1):
            Neighbours `w` on each side that a word node reads at every step (paper: 1).
        num_sentence_nodes (`int`, *optional*, defaults to 1):
            Number of sentence-level nodes `K`. 0 removes global exchange; with more than one, each sentence node's
            gates read all sentence states (the paper's "dummy nodes" that exchange information with each other).
        gate_normalization (`str`, *optional*, defaults to `"sigmoid_softmax"`):
            How the cell gates are normalised to sum to one: `"sigmoid_softmax"` applies the softmax to sigmoid
            outputs as the paper and its code do; `"softmax"` applies it to the raw pre-activations.
        context_independent_content (`bool`, *optional*, defaults to `False`):
            "LSTM - S-RNN" simplification of Levy et al. (2018): the content `u_i = U_u x_i + b_u` is a linear,
            context-independent function of the word, so only the gates see the context.
        remove_output_gate (`bool`, *optional*, defaults to `False`):
            "LSTM - output gate" simplification of Levy et al. (2018): `h = tanh(c)` for word and sentence nodes.
        embedding_dropout (`float`, *optional*, defaults to 0.5):
            Dropout on the word representations `x_i` (the paper's only dropout).
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

    def __init__(
        self,
        vocab_size: int = 30000,
        embedding_dim: int = 300,
        hidden_size: int = 300,
        num_steps: int = 9,
        window_size: int = 1,
        num_sentence_nodes: int = 1,
        gate_normalization: str = "sigmoid_softmax",
        context_independent_content: bool = False,
        remove_output_gate: bool = False,
        embedding_dropout: float = 0.5,
        hidden_dropout: float = 0.0,
        classifier_dropout: float = 0.0,
        classifier_pooling: str = "sentence",
        use_crf: bool = False,
        crf_constraints: bool = True,
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
        self.gate_normalization = gate_normalization
        self.context_independent_content = context_independent_content
        self.remove_output_gate = remove_output_gate
        self.embedding_dropout = embedding_dropout
        self.hidden_dropout = hidden_dropout
        self.classifier_dropout = classifier_dropout
        self.classifier_pooling = classifier_pooling
        self.use_crf = use_crf
        self.crf_constraints = crf_constraints
        self.initializer_range = initializer_range
        self.pad_token_id = pad_token_id
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id
        kwargs.setdefault("auto_map", dict(AUTO_MAP))
        super().__init__(**kwargs)
        self._validate_slstm_settings()

    def _validate_slstm_settings(self):
        minimums = {
            "vocab_size": 1,
            "embedding_dim": 1,
            "hidden_size": 1,
            "num_steps": 1,
            "window_size": 1,
            "num_sentence_nodes": 0,
        }
        for name, minimum in minimums.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise ValueError(f"SLSTMConfig.{name} must be an integer >= {minimum}, got {value!r}")
        for name in ("embedding_dropout", "hidden_dropout", "classifier_dropout"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"SLSTMConfig.{name} must be in [0, 1), got {value!r}")
        if self.gate_normalization not in GATE_NORMALIZATIONS:
            raise ValueError(
                f"SLSTMConfig.gate_normalization must be one of {GATE_NORMALIZATIONS}, got {self.gate_normalization!r}"
            )
        if self.classifier_pooling not in CLASSIFIER_POOLINGS:
            raise ValueError(
                f"SLSTMConfig.classifier_pooling must be one of {CLASSIFIER_POOLINGS}, got {self.classifier_pooling!r}"
            )


__all__ = ["SLSTMConfig"]
