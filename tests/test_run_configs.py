"""hub_configs/: the paper's configurations, the demo's small one, and the accelerate launch configs."""

import pytest
from accelerate.commands.config.config_args import ClusterConfig
from test_run_helpers import REPO, training_utils

PAPER = {
    "slstm-ner-crf.json": {"num_steps": 9, "use_crf": True},
    "slstm-pos.json": {"num_steps": 7, "use_crf": False},
    "slstm-classification.json": {"num_steps": 9, "classifier_pooling": "attention"},
}


@pytest.mark.parametrize("name", sorted(PAPER))
def test_paper_configs(name):
    config = training_utils.load_fresh_config(
        training_utils.ModelArguments(config_name=str(REPO / "hub_configs" / name))
    )
    assert (config.hidden_size, config.window_size, config.num_sentence_nodes) == (300, 1, 1)
    assert config.embedding_dropout == 0.5
    for key, value in PAPER[name].items():
        assert getattr(config, key) == value
    assert not hasattr(config, "_comment")


def test_small_config_and_overrides():
    config = training_utils.load_fresh_config(
        training_utils.ModelArguments(
            config_name=str(REPO / "hub_configs" / "slstm-ner-crf-small.json"),
            config_overrides="hidden_size=8,use_crf=false",
        )
    )
    assert (config.hidden_size, config.embedding_dim, config.use_crf) == (8, 50, False)
    with pytest.raises(ValueError, match="num_steps"):
        training_utils.load_fresh_config(training_utils.ModelArguments(config_overrides="num_steps=0"))


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
