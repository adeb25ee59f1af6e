"""hub_configs/: the paper's configurations, the demo's small one, the training recipe that ships with them, and the
accelerate launch configs."""

import json
import logging
import re

import pytest
import torch
from accelerate.commands.config.config_args import ClusterConfig
from script_helpers import REPO
from transformers import AutoConfig

from baselines import BaselineEncoderConfig, BaselineModel
from modeling_slstm import SLSTMConfig
from modeling_slstm.modeling_slstm import SLSTMEmbeddings
from run_scripts.training import logging_setup, model_setup
from run_scripts.training.arguments import DataArguments, ModelArguments, parse_training_arguments
from run_scripts.training.recipe import RECIPE_KEY, read_training_recipe

PAPER = {
    "slstm-ner-crf.json": {"num_steps": 9, "use_crf": True},
    "slstm-pos.json": {"num_steps": 7, "use_crf": False},
    "slstm-classification-paper.json": {"num_steps": 9, "classifier_pooling": "attention"},
    # chosen on dev, else the paper's
    "slstm-classification.json": {"num_steps": 7, "classifier_pooling": "attention"},
}
PAPER_RECIPE = {
    "learning_rate": 1e-3,
    "lr_decay_per_epoch": 0.97,
    "max_grad_norm": 3.0,
    "per_device_train_batch_size": 10,
    "train_sampling_strategy": "group_by_length",
}


@pytest.mark.parametrize("name", sorted(PAPER))
def test_paper_configs(name):
    config = model_setup.load_fresh_config(ModelArguments(config_name=str(REPO / "hub_configs" / name)))
    recipe, _ = read_training_recipe(str(REPO / "hub_configs" / name))
    assert (config.hidden_size, config.window_size, config.num_sentence_nodes) == (300, 1, 1)
    assert config.embedding_dropout == 0.5
    for key, value in PAPER[name].items():
        assert getattr(config, key) == value
    assert not hasattr(config, "_comment")
    # The recipe ships with the config but is not part of the model's config (nor of a checkpoint's config.json).
    assert recipe == PAPER_RECIPE
    assert not hasattr(config, RECIPE_KEY)
    assert RECIPE_KEY not in config.to_json_string()


@pytest.mark.parametrize(
    "path", sorted((REPO / "hub_configs" / "baselines").glob("*.json")), ids=lambda path: path.name
)
def test_baseline_configs_match_their_names(path):
    """`{encoder}{layers}-{task}[-chars].json`: the encoder and layer count its name says, a CRF exactly for NER,
    character features exactly with `-chars`, and the paper's recipe (the baselines ship none of their own, so the
    comparisons share the S-LSTM's)."""
    encoder_and_layers, task = path.stem.split("-", 1)
    task, chars = task.removesuffix("-chars"), task.endswith("-chars")
    config = model_setup.load_fresh_config(ModelArguments(config_name=str(path)))
    assert isinstance(config, BaselineEncoderConfig)
    assert f"{config.encoder_type}{config.num_layers}" == encoder_and_layers
    assert config.use_crf == (task == "ner-crf")
    assert config.use_char_features == chars
    assert read_training_recipe(str(path))[0] is None
    _, _, training_args, _ = parse_training_arguments(
        DataArguments, ["--train_file", "t.txt", "--output_dir", "unused", "--config_name", str(path)]
    )
    assert {name: getattr(training_args, name) for name in PAPER_RECIPE} == PAPER_RECIPE


def test_fair_ner_baseline_has_the_slstm_character_cnn():
    """The NER BiLSTM-CRF of the speed comparisons (`bilstm1-ner-crf-chars.json`) reads the words as the S-LSTM's NER
    config does: the same word representation (embedding and character CNN sizes, dropouts) and the same character
    CNN module, parameter for parameter; it differs from `bilstm1-ner-crf.json` only by the characters."""
    baselines = REPO / "hub_configs" / "baselines"
    slstm = model_setup.load_fresh_config(ModelArguments(config_name=str(REPO / "hub_configs" / "slstm-ner-crf.json")))
    fair = model_setup.load_fresh_config(ModelArguments(config_name=str(baselines / "bilstm1-ner-crf-chars.json")))
    plain = json.loads((baselines / "bilstm1-ner-crf.json").read_text())
    words = ["embedding_dim", "embedding_dropout", "use_char_features", "char_embedding_dim", "char_hidden_size",
             "char_kernel_size", "char_dropout", "word_representation_dim"]  # fmt: skip
    assert {name: getattr(fair, name) for name in words} == {name: getattr(slstm, name) for name in words}
    assert fair.use_char_features and fair.word_representation_dim == 330
    fair_json = json.loads((baselines / "bilstm1-ner-crf-chars.json").read_text())
    assert {key: value for key, value in fair_json.items() if not key.startswith(("char_", "use_char", "_"))} == {
        key: value for key, value in plain.items() if key != "_comment"
    }
    for config in (slstm, fair):
        config.char_vocab_size = 50
    slstm_chars = SLSTMEmbeddings(slstm).char_encoder
    fair_chars = BaselineModel(fair).embeddings.char_encoder
    assert type(slstm_chars) is type(fair_chars)
    assert {name: p.shape for name, p in slstm_chars.named_parameters()} == {
        name: p.shape for name, p in fair_chars.named_parameters()
    }


def test_recipe_key_does_not_break_config_loading(tmp_path):
    """Loading a hub config directly (the recipe becomes a config attribute) still gives a valid SLSTMConfig."""
    config = AutoConfig.from_pretrained(REPO / "hub_configs" / "slstm-pos.json")
    assert isinstance(config, SLSTMConfig) and config.num_steps == 7
    assert config.training_recipe == PAPER_RECIPE
    config.save_pretrained(tmp_path)
    assert SLSTMConfig.from_pretrained(tmp_path).training_recipe == PAPER_RECIPE


def test_small_config_and_overrides():
    small = str(REPO / "hub_configs" / "slstm-ner-crf-small.json")
    config = model_setup.load_fresh_config(
        ModelArguments(config_name=small, config_overrides="hidden_size=8,use_crf=false")
    )
    assert (config.hidden_size, config.embedding_dim, config.use_crf) == (8, 50, False)
    recipe, _ = read_training_recipe(small)
    assert recipe == dict(PAPER_RECIPE, learning_rate=5e-3, lr_decay_per_epoch=0.9)  # the README demo's recipe
    with pytest.raises(ValueError, match="num_steps"):
        model_setup.load_fresh_config(ModelArguments(config_overrides="num_steps=0"))


def test_accelerate_configs():
    expected = {
        "single_cpu.yaml": "NO",
        "multi_cpu_2proc.yaml": "MULTI_GPU",  # torchrun-started; gloo on CPU-only machines
        "multi_gpu_ddp.yaml": "MULTI_GPU",
        "fsdp.yaml": "FSDP",
    }
    for name, kind in expected.items():
        config = ClusterConfig.from_yaml_file(REPO / "hub_configs" / "accelerate" / name)
        assert config.distributed_type.value == kind, name
    fsdp = ClusterConfig.from_yaml_file(REPO / "hub_configs" / "accelerate" / "fsdp.yaml")
    assert fsdp.fsdp_config["fsdp_transformer_layer_cls_to_wrap"] == "SLSTMStateTransition"


# --------------------------------------------------------------------------------------------------------------------
# From-scratch training recipe
# --------------------------------------------------------------------------------------------------------------------


def resolve(tmp_path, config_name, *flags):
    """The training arguments of a fresh model from `config_name` with the command line `flags`, after the recipe,
    and what the recipe applied."""
    argv = ["--train_file", "train.txt", "--output_dir", str(tmp_path), *flags]
    if config_name is not None:
        argv += ["--config_name", str(config_name)]
    _, _, training_args, recipe = parse_training_arguments(DataArguments, argv)
    if recipe is not None:
        logging.getLogger("run_scripts").info(recipe.describe())  # as the entry points log it
    return training_args, recipe.applied if recipe is not None else {}


def recipe_lines(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if "trained with the recipe of" in record.getMessage()]


def test_fresh_model_gets_the_configs_recipe_and_logs_one_line(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    config_name = REPO / "hub_configs" / "slstm-pos.json"
    training_args, applied = resolve(tmp_path, config_name)
    assert applied == PAPER_RECIPE
    for name, value in PAPER_RECIPE.items():
        assert getattr(training_args, name) == value, name
    (line,) = recipe_lines(caplog)
    assert str(config_name) in line
    for name, value in PAPER_RECIPE.items():
        assert f"{name}={value}" in line
    assert "kept from the command line" not in line


def test_command_line_wins_even_when_it_gives_the_default(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    # 5e-5 and 1.0 are the Trainer's defaults: given explicitly, they must still win over the recipe.
    training_args, applied = resolve(
        tmp_path,
        REPO / "hub_configs" / "slstm-ner-crf.json",
        "--learning_rate",
        "5e-5",
        "--max_grad_norm=1.0",
        "--lr_scheduler_type",
        "cosine",
    )
    assert (training_args.learning_rate, training_args.max_grad_norm) == (5e-5, 1.0)
    assert training_args.lr_decay_per_epoch is None  # the user chose the schedule: no per-epoch decay on top
    assert applied == {"per_device_train_batch_size": 10, "train_sampling_strategy": "group_by_length"}
    assert training_args.per_device_train_batch_size == 10
    (line,) = recipe_lines(caplog)
    assert "kept from the command line: learning_rate=5e-05, lr_decay_per_epoch=None, max_grad_norm=1.0" in line


def test_configs_without_recipe(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    # A baseline config without its own recipe trains with the paper's, as does the default SLSTMConfig.
    baseline = REPO / "hub_configs" / "baselines" / "bilstm1-ner-crf.json"
    assert RECIPE_KEY not in json.loads(baseline.read_text())
    training_args, applied = resolve(tmp_path, baseline)
    assert applied == PAPER_RECIPE and training_args.learning_rate == 1e-3
    assert "the paper" in recipe_lines(caplog)[0]
    assert resolve(tmp_path, None)[1] == PAPER_RECIPE
    # Another model type keeps the Trainer's defaults.
    bert = tmp_path / "bert.json"
    bert.write_text(json.dumps({"model_type": "bert", "num_hidden_layers": 1}))
    training_args, applied = resolve(tmp_path, bert)
    assert applied == {} and training_args.learning_rate == 5e-5


def test_bad_recipe_names_the_key(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "sentence_state_lstm", "training_recipe": {"learning_rat": 1e-3}}))
    with pytest.raises(ValueError, match="'learning_rat', which is not a training argument"):
        resolve(tmp_path, config)
    config.write_text(json.dumps({"training_recipe": {"train_sampling_strategy": "by_length"}}))
    with pytest.raises(ValueError, match="train_sampling_strategy='by_length'; expected one of"):
        resolve(tmp_path, config)


def test_the_command_line_wins_however_spelled(tmp_path):
    """The recipe is the parser's defaults: an abbreviated flag, a `--no_` spelling and a JSON file of arguments all
    set what they name, and the recipe the rest."""
    config_name = str(REPO / "hub_configs" / "slstm-pos.json")
    training_args, applied = resolve(
        tmp_path, config_name, "--learning_r", "5e-5", "--no_remove_unused_columns", "--max_grad_n", "3.0"
    )
    assert training_args.learning_rate == 5e-5 and training_args.remove_unused_columns is False
    assert applied == {name: value for name, value in PAPER_RECIPE.items() if name != "learning_rate"}
    arguments = tmp_path / "arguments.json"
    values = {"train_file": "t.txt", "output_dir": str(tmp_path), "learning_rate": 5e-5, "config_name": config_name}
    arguments.write_text(json.dumps(values))
    _, _, training_args, recipe = parse_training_arguments(DataArguments, [str(arguments)])
    assert training_args.learning_rate == 5e-5 and recipe.kept == {"learning_rate": 5e-5}
    assert recipe.applied == {name: value for name, value in PAPER_RECIPE.items() if name != "learning_rate"}


def test_a_checkpoint_trains_with_the_trainers_defaults(tmp_path):
    _, _, training_args, recipe = parse_training_arguments(
        DataArguments, ["--train_file", "t.txt", "--output_dir", str(tmp_path), "--model_name_or_path", "out"]
    )
    assert recipe is None and training_args.learning_rate == 5e-5 and training_args.lr_decay_per_epoch is None


def test_pin_memory_only_with_an_accelerator(tmp_path, monkeypatch):
    """Pinning needs an accelerator: without one the DataLoader would warn at every epoch."""

    argv = ["--train_file", "t.txt", "--output_dir", str(tmp_path)]
    assert parse_training_arguments(DataArguments, argv)[2].dataloader_pin_memory is False
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: torch.device("cuda"))
    assert parse_training_arguments(DataArguments, argv)[2].dataloader_pin_memory is True
    assert (
        parse_training_arguments(DataArguments, [*argv, "--dataloader_pin_memory", "false"])[2].dataloader_pin_memory
        is False
    )


def test_defaults_for_ddp_and_the_hub(tmp_path):
    _, _, training_args, _ = parse_training_arguments(
        DataArguments, ["--train_file", "t.txt", "--output_dir", str(tmp_path)]
    )
    assert training_args.ddp_find_unused_parameters is False and training_args.hub_strategy == "end"


def test_config_name_with_model_name_or_path_is_an_error():
    with pytest.raises(ValueError, match=r"--model_name_or_path out/ner loads .*, so --config_name \(for a fresh"):
        ModelArguments(model_name_or_path="out/ner", config_name="hub_configs/slstm-pos.json")
    with pytest.raises(ValueError, match=r"so --config_name and --config_overrides \(for a fresh model\)"):
        ModelArguments(model_name_or_path="out", config_name="c.json", config_overrides="x=1")


@pytest.mark.parametrize("native_bf16", [False, True])
def test_bf16_on_a_cpu_without_native_bf16_warns(tmp_path, monkeypatch, caplog, native_bf16):
    monkeypatch.setattr(logging_setup.cpu_matmul, "cpu_has_fast_bf16", lambda: native_bf16)
    _, _, training_args, _ = parse_training_arguments(
        DataArguments,
        ["--train_file", "t.txt", "--output_dir", str(tmp_path), "--use_cpu", "--bf16"],
    )
    with caplog.at_level(logging.WARNING):
        logging_setup.warn_if_bf16_is_slow(training_args)
    warned = [record.getMessage() for record in caplog.records if "not faster than float32" in record.getMessage()]
    assert len(warned) == (0 if native_bf16 else 1)


@pytest.mark.parametrize("warmup", ["4", "0.25"])  # steps, or a fraction of the training steps
def test_warmup_steps_take_the_place_of_the_recipes_per_epoch_decay(tmp_path, caplog, warmup):
    """`--warmup_steps` chooses the Trainer's warmup-then-decay schedule: the recipe's per-epoch decay yields to it,
    as to `--lr_scheduler_type`, and the rest of the recipe applies."""
    caplog.set_level(logging.INFO)
    training_args, applied = resolve(tmp_path, REPO / "hub_configs" / "slstm-pos.json", "--warmup_steps", warmup)
    assert training_args.warmup_steps == float(warmup)
    assert training_args.lr_decay_per_epoch is None
    assert applied == {name: value for name, value in PAPER_RECIPE.items() if name != "lr_decay_per_epoch"}
    (line,) = recipe_lines(caplog)
    assert line.endswith("kept from the command line: lr_decay_per_epoch=None")


@pytest.mark.parametrize("warmup", ["4", "0.25"])  # steps, or a fraction of the training steps
def test_an_explicit_per_epoch_decay_and_warmup_are_refused_together(tmp_path, warmup):
    """Both on the command line: the per-epoch decay replaces the Trainer's schedule and would drop the warmup
    silently, so the arguments are refused, naming both, whether the warmup is a number of steps or a ratio."""
    config = REPO / "hub_configs" / "slstm-pos.json"
    assert resolve(tmp_path, config, "--lr_decay_per_epoch", "0.9")[0].lr_decay_per_epoch == 0.9  # alone: accepted
    with pytest.raises(ValueError, match=rf"--lr_decay_per_epoch 0\.9 .* --warmup_steps {re.escape(warmup)}"):
        resolve(tmp_path, config, "--lr_decay_per_epoch", "0.9", "--warmup_steps", warmup)
