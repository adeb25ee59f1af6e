"""transformers' own generic model tests, run against the S-LSTM models.

`ModelTesterMixin` (from `tests/test_modeling_common.py`) and `ConfigTester` (from `tests/test_configuration_common.py`)
of the transformers test suite check what every model of the library must do: save/load round trips, weight
initialisation, `inputs_embeds`, hidden-state outputs, tuple/dict output equivalence, batching equivalence, training
and gradient checkpointing, embedding resizing, device-map loading, the problem types of sequence classification...
They are applied here to `SLSTMModel`, `SLSTMForSequenceClassification` and `SLSTMForTokenClassification`, with a
second class for the CRF token classifier (`use_crf=True`), following the layout of a model test file of transformers
(e.g. `tests/models/bert/test_modeling_bert.py`).

Those test modules are not part of the installed wheel: point `TRANSFORMERS_TESTS_DIR` at the `tests/` folder of the
transformers source (the sdist, matching the installed version, or a git checkout) and run

    TRANSFORMERS_TESTS_DIR=/path/to/transformers-5.23.0/tests python -m pytest -q tests/model/test_transformers_common.py

Without that folder, or without `parameterized` (which those modules import; transformers' "testing" extra), the
whole module is skipped.

Import details:
- The folder is imported as the package `transformers_tests` (not `tests`, which would clash with this repository's
  own `tests/` folder).
- The sdist ships only the top-level test modules. The helpers they import from sub-folders that it lacks are replaced
  by stand-ins: `ExportTesterMixin` (the `torch.export`/ONNX export tests, which then do not run; this repository's
  `test_export_onnx.py` covers export), `GenerationTesterMixin` (the S-LSTM models do not generate) and
  `config_common_kwargs` (empty, so `ConfigTester.check_config_arguments_init` has nothing to check). With a git
  checkout the real modules are used.
- The mixin picks the labels and the applicable tests of a model class by looking its name up in transformers' Auto
  name mappings (`MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES`, ...), which list the library's own models only. The
  test classes add the S-LSTM classes to them while they run, so that these checks (the problem types, mismatched
  shapes, base-model loading, training skips) apply to the S-LSTM models instead of passing without checking anything.
"""

import contextlib
import importlib
import importlib.machinery
import importlib.util
import os
import sys
import types
import unittest
import warnings
from pathlib import Path
from unittest import mock

import pytest
import torch
from helpers import BIO_LABELS, VOCAB_SIZE, tagger_config
from transformers.models.auto import modeling_auto

from modeling_slstm import SLSTMConfig, SLSTMForSequenceClassification, SLSTMForTokenClassification, SLSTMModel

TESTS_PACKAGE = "transformers_tests"
# Modules that the two test modules import from sub-folders the sdist lacks, with the stand-ins used then.
MISSING_IN_SDIST = {
    "exporters/test_export.py": {"ExportTesterMixin": type("ExportTesterMixin", (), {})},
    "generation/test_utils.py": {"GenerationTesterMixin": type("GenerationTesterMixin", (), {})},
    "utils/test_configuration_utils.py": {"config_common_kwargs": {}},
}


def import_transformers_tests(tests_dir: Path) -> tuple[types.ModuleType, types.ModuleType]:
    """`test_modeling_common` and `test_configuration_common` of the transformers test folder `tests_dir`."""
    package = importlib.util.module_from_spec(importlib.machinery.ModuleSpec(TESTS_PACKAGE, None, is_package=True))
    package.__path__ = [str(tests_dir)]
    sys.modules[TESTS_PACKAGE] = package
    for relative_path, attributes in MISSING_IN_SDIST.items():
        if (tests_dir / relative_path).exists():
            continue
        parts = relative_path.removesuffix(".py").split("/")
        for depth in range(1, len(parts) + 1):
            name = ".".join([TESTS_PACKAGE, *parts[:depth]])
            module = sys.modules.setdefault(name, types.ModuleType(name))
            if depth < len(parts):
                module.__path__ = []
        vars(module).update(attributes)
    with warnings.catch_warnings():
        # Its marks (`flash_attn_test`, ...) are registered in transformers' own pytest settings, not in these.
        warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
        modeling_common = importlib.import_module(f"{TESTS_PACKAGE}.test_modeling_common")
    # `test_configuration_common` loads `tests/__init__.py` as `transformers` (an empty file in a git checkout, which
    # leaves the imported `transformers` as it is); the sdist has no such file.
    has_init = (tests_dir / "__init__.py").exists()
    keep_transformers = mock.patch(
        "transformers.utils.direct_transformers_import", lambda *_: sys.modules["transformers"]
    )
    with contextlib.nullcontext() if has_init else keep_transformers:
        configuration_common = importlib.import_module(f"{TESTS_PACKAGE}.test_configuration_common")
    return modeling_common, configuration_common


TESTS_DIR = os.environ.get("TRANSFORMERS_TESTS_DIR")
if not TESTS_DIR or not (Path(TESTS_DIR) / "test_modeling_common.py").is_file():
    reason = (
        "set TRANSFORMERS_TESTS_DIR to the tests/ folder of the transformers source (sdist or git checkout) to run "
        f"transformers' common model tests (got {TESTS_DIR!r})"
    )
    # `.ci/run` provides the folder: there, a skip would hide that these tests did not run.
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)
pytest.importorskip("parameterized", reason="transformers' common model tests import `parameterized`")
modeling_common, configuration_common = import_transformers_tests(Path(TESTS_DIR))
ModelTesterMixin = modeling_common.ModelTesterMixin
ConfigTester = configuration_common.ConfigTester
ids_tensor, random_attention_mask = modeling_common.ids_tensor, modeling_common.random_attention_mask

FIRST_WORD_ID = 4  # ids 0-3 are <pad>, <unk>, <s>, </s>
# Token labels, repeated along the sequence: a valid IOB2 sequence over `BIO_LABELS` with every tag, unlike the mixin's
# all-zero (all `O`) labels, and without the transitions that the CRF's constraints forbid (they cost a huge loss).
TAG_CYCLE = ["B-PER", "I-PER", "O", "B-LOC", "I-LOC", "I-LOC", "O"]
AUTO_NAMES = {
    "MODEL_MAPPING_NAMES": SLSTMModel,
    "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES": SLSTMForSequenceClassification,
    "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES": SLSTMForTokenClassification,
}


class SLSTMModelTester:
    """A tiny S-LSTM config (`helpers.tagger_config` with 2 steps, the mixin's limit on layers) and a batch of word
    ids with a random attention mask."""

    def __init__(self, parent, batch_size=3, seq_length=7, is_training=True, **config_overrides):
        self.parent = parent
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.is_training = is_training
        self.config_overrides = {"num_steps": 2, **config_overrides}
        config = self.get_config()
        self.hidden_size = config.hidden_size
        self.num_labels = config.num_labels
        # The recurrent steps are the layers: `hidden_states` holds the word states h^0 ... h^T.
        self.num_hidden_layers = config.num_steps

    def get_config(self) -> SLSTMConfig:
        return tagger_config(**self.config_overrides)

    def prepare_config_and_inputs(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], VOCAB_SIZE - FIRST_WORD_ID) + FIRST_WORD_ID
        attention_mask = random_attention_mask([self.batch_size, self.seq_length])
        sequence_labels = ids_tensor([self.batch_size], self.num_labels)
        token_labels = ids_tensor([self.batch_size, self.seq_length], self.num_labels)
        return self.get_config(), input_ids, attention_mask, sequence_labels, token_labels

    def create_and_check_model(self, config, input_ids, attention_mask, *labels):
        model = SLSTMModel(config).eval()
        with torch.no_grad():
            result = model(input_ids, attention_mask=attention_mask)
            model(input_ids)
        self.parent.assertEqual(result.last_hidden_state.shape, (self.batch_size, self.seq_length, self.hidden_size))
        self.parent.assertEqual(result.pooler_output.shape, (self.batch_size, self.hidden_size))

    def create_and_check_for_sequence_classification(
        self, config, input_ids, attention_mask, sequence_labels, token_labels
    ):
        model = SLSTMForSequenceClassification(config).eval()
        with torch.no_grad():
            result = model(input_ids, attention_mask=attention_mask, labels=sequence_labels)
        self.parent.assertEqual(result.logits.shape, (self.batch_size, self.num_labels))
        self.parent.assertEqual(result.loss.shape, ())

    def create_and_check_for_token_classification(
        self, config, input_ids, attention_mask, sequence_labels, token_labels
    ):
        model = SLSTMForTokenClassification(config).eval()
        with torch.no_grad():
            result = model(input_ids, attention_mask=attention_mask, labels=token_labels)
        self.parent.assertEqual(result.logits.shape, (self.batch_size, self.seq_length, self.num_labels))
        self.parent.assertEqual(result.loss.shape, ())

    def prepare_config_and_inputs_for_common(self):
        config, input_ids, attention_mask, *_ = self.prepare_config_and_inputs()
        return config, {"input_ids": input_ids, "attention_mask": attention_mask}


class SLSTMCommonTests(ModelTesterMixin):
    """The mixin's settings for the S-LSTM models and the labels of their heads."""

    # No attention outputs. The other defaults hold: `get_input_embeddings` is the word embedding, which can be
    # resized; there are no position embeddings to resize.
    has_attentions = False
    # The mixin runs this check only for models whose config file carries a copyright year of 2023 or later.
    test_can_init_all_missing_weights_before_2023 = True

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        for mapping, model_class in AUTO_NAMES.items():
            names = getattr(modeling_auto, mapping)
            cls.enterClassContext(mock.patch.dict(names, {SLSTMConfig.model_type: model_class.__name__}))

    def _prepare_for_class(self, inputs_dict, model_class, return_labels=False):
        inputs_dict = super()._prepare_for_class(inputs_dict, model_class, return_labels=return_labels)
        if return_labels and model_class is SLSTMForTokenClassification:
            batch_size, seq_length = self.model_tester.batch_size, self.model_tester.seq_length
            tags = [BIO_LABELS.index(TAG_CYCLE[i % len(TAG_CYCLE)]) for i in range(seq_length)]
            inputs_dict["labels"] = torch.tensor(tags).expand(batch_size, seq_length).clone()
        return inputs_dict

    def test_config(self):
        self.config_tester.run_common_tests()


class SLSTMModelTest(SLSTMCommonTests, unittest.TestCase):
    all_model_classes = (SLSTMModel, SLSTMForSequenceClassification, SLSTMForTokenClassification)

    def setUp(self):
        self.model_tester = SLSTMModelTester(self)
        self.config_tester = ConfigTester(
            self,
            config_class=SLSTMConfig,
            common_properties=["hidden_size", "embedding_dim", "num_steps"],
            hidden_size=37,
        )

    def test_model(self):
        self.model_tester.create_and_check_model(*self.model_tester.prepare_config_and_inputs())

    def test_for_sequence_classification(self):
        self.model_tester.create_and_check_for_sequence_classification(*self.model_tester.prepare_config_and_inputs())

    def test_for_token_classification(self):
        self.model_tester.create_and_check_for_token_classification(*self.model_tester.prepare_config_and_inputs())


class SLSTMCRFTokenClassificationTest(SLSTMCommonTests, unittest.TestCase):
    """The token classifier with its linear-chain CRF (`use_crf=True`): other parameters, another loss and logits."""

    all_model_classes = (SLSTMForTokenClassification,)

    def setUp(self):
        self.model_tester = SLSTMModelTester(self, use_crf=True)
        self.config_tester = ConfigTester(
            self, config_class=SLSTMConfig, common_properties=["hidden_size", "use_crf"], use_crf=True
        )

    def test_for_token_classification(self):
        self.model_tester.create_and_check_for_token_classification(*self.model_tester.prepare_config_and_inputs())
