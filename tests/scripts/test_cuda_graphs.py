"""`--cuda_graphs` of the training scripts, as far as a CPU can check its arguments: whole-step graphs
(tests/scripts/test_whole_step_graphs.py runs them) without `torch.compile`, refused without a CUDA GPU, alone gets the
capturable optimizer, and the GPU collators' padding gives a corpus few batch shapes, each captured once; the
collators' own padding of character ids gives the tokenizer's batch."""

from types import SimpleNamespace

import pytest
import torch
from helpers import build
from transformers import DataCollatorForTokenClassification, HfArgumentParser

from modeling_slstm import SLSTMForSequenceClassification
from modeling_slstm.tokenization_slstm import build_word_tokenizer
from run_scripts.benchmarks.support import workloads
from run_scripts.training import gpu_batching
from run_scripts.training.arguments import SLSTMTrainingArguments
from run_scripts.training.trainer import SLSTMTrainer


def parse(tmp_path, *flags):
    parser = HfArgumentParser(SLSTMTrainingArguments)
    (arguments,) = parser.parse_args_into_dataclasses(["--output_dir", str(tmp_path), "--report_to", "none", *flags])
    return arguments


@pytest.mark.parametrize(
    "flags", [["--torch_compile"], ["--torch_compile_mode", "reduce-overhead"], ["--torch_compile_backend", "eager"]]
)
def test_cuda_graphs_capture_the_eager_step_and_refuse_torch_compile(tmp_path, monkeypatch, flags):
    arguments, compiled = parse(tmp_path), parse(tmp_path, *flags)
    too_few = parse(tmp_path, "--cuda_graphs_max_shapes", "0")
    # As if on a GPU machine (parsing there would also make transformers set up the GPU).
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    arguments.use_cuda_graphs()
    assert not arguments.torch_compile and arguments.torch_compile_mode is None  # the model stays eager
    with pytest.raises(ValueError, match="--cuda_graphs captures the whole eager training step .* --torch_compile"):
        compiled.use_cuda_graphs()
    with pytest.raises(ValueError, match="--cuda_graphs_max_shapes must be at least 1, got 0"):
        too_few.use_cuda_graphs()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a CUDA GPU")
def test_cuda_graphs_refuses_to_run_without_a_cuda_gpu(tmp_path):
    with pytest.raises(ValueError, match=r"--cuda_graphs .* needs a CUDA GPU: torch.cuda.is_available\(\) is False"):
        parse(tmp_path, "--cuda_graphs")


def test_cuda_graphs_alone_gets_the_capturable_optimizer(tmp_path):
    """`--cuda_graphs` with no other optimizer option still gets the capturable optimizer its help promises: every
    group's learning rate a tensor on the device, each group covering the model's weights once, and Adam's step counts
    on the device where a graph can capture them (CUDA; torch.optim refuses `capturable` on a CPU). Checked on the
    CPU: the flag is set after parsing, which refuses it without a CUDA GPU."""
    model = build(SLSTMForSequenceClassification, num_labels=2)
    arguments = SLSTMTrainingArguments(output_dir=str(tmp_path), learning_rate=0.01, report_to="none", use_cpu=True)
    arguments.cuda_graphs = True
    optimizer = SLSTMTrainer(model=model, args=arguments).create_optimizer()
    assert optimizer.defaults["capturable"] == (arguments.device.type == "cuda")
    rates = [group["lr"] for group in optimizer.param_groups]
    assert all(isinstance(rate, torch.Tensor) and rate.device == arguments.device for rate in rates)
    assert [rate.item() for rate in rates] == pytest.approx([0.01] * len(rates))
    grouped = [id(parameter) for group in optimizer.param_groups for parameter in group["params"]]
    assert sorted(grouped) == sorted(id(parameter) for parameter in model.parameters())


def test_gpu_batches_of_a_corpus_take_few_shapes(shared_data):
    # Every batch is padded to its longest sentence, so its width is the padded length of some sentence: a corpus has
    # at most as many batch widths (and captured graphs per batch size) as padded sentence lengths.
    lengths = set(workloads.corpus_lengths(shared_data("conll2003").parent, "conll2003-ner"))
    tokenizer = build_word_tokenizer([["a"]])
    cuda = SimpleNamespace(device=torch.device("cuda"))
    collator = gpu_batching.data_collator(DataCollatorForTokenClassification, tokenizer, cuda)
    sentences = [{"input_ids": [4] * length, "labels": [0] * length} for length in lengths]
    widths = {collator([sentence])["input_ids"].size(1) for sentence in sentences}
    assert len(lengths) > 60 and len(widths) == 11  # as gpu_batching.py states: 115 tokens at most, steps of 8
    assert all(width % gpu_batching.GPU_PAD_MULTIPLE == 0 for width in widths)


@pytest.mark.parametrize("padding_side", ["right", "left"])
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_char_ids_padding_gives_the_tokenizers_batch(padding_side, device):
    # The tokenizer's own padding (through the plain collator) is the oracle: sentences of several lengths, words
    # longer than a char_ids row, padding to the longest sentence on a CPU and to a multiple of 8 on a GPU.
    words = [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"], ["a", "b", "c", "d", "e", "f", "g"]]
    tokenizer = build_word_tokenizer(words, max_word_length=5)
    tokenizer.padding_side = padding_side
    features = []
    for sentence in words:
        encoded = tokenizer(sentence, is_split_into_words=True)
        features.append({**encoded, "labels": [index % 3 for index in range(len(encoded["input_ids"]))]})
    training_args = SimpleNamespace(device=torch.device(device))
    plain = DataCollatorForTokenClassification(
        tokenizer, pad_to_multiple_of=gpu_batching.pad_multiple_for(training_args.device)
    )
    expected, batch = (
        plain(features),
        gpu_batching.data_collator(DataCollatorForTokenClassification, tokenizer, training_args)(features),
    )
    assert set(batch) == set(expected) and "char_ids" in batch
    for name in expected:
        assert torch.equal(batch[name], expected[name]), name
    assert batch["char_ids"].dtype == expected["char_ids"].dtype
