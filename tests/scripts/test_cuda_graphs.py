"""`--cuda_graphs` of the training scripts, as far as a CPU can check it: the flag turns on `torch.compile`'s
`reduce-overhead` mode (CUDA graphs), refuses to run without a CUDA GPU, and the GPU collators' padding gives a corpus
few batch shapes, each captured once."""

from types import SimpleNamespace

import pytest
import torch
from transformers import DataCollatorForTokenClassification, HfArgumentParser

from modeling_slstm.tokenization_slstm import build_word_tokenizer
from run_scripts.benchmarks.support import workloads
from run_scripts.training import gpu_batching
from run_scripts.training.arguments import SLSTMTrainingArguments


def parse(tmp_path, *flags):
    parser = HfArgumentParser(SLSTMTrainingArguments)
    (arguments,) = parser.parse_args_into_dataclasses(["--output_dir", str(tmp_path), "--report_to", "none", *flags])
    return arguments


def test_cuda_graphs_is_torch_compile_in_reduce_overhead_mode(tmp_path, monkeypatch):
    arguments, conflicting = parse(tmp_path), parse(tmp_path, "--torch_compile_mode", "max-autotune")
    assert not arguments.torch_compile
    # As if on a GPU machine (parsing there would also make transformers set up the GPU).
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    arguments.use_cuda_graphs()
    assert arguments.torch_compile and arguments.torch_compile_mode == "reduce-overhead"
    with pytest.raises(ValueError, match="'reduce-overhead', got --torch_compile_mode 'max-autotune'"):
        conflicting.use_cuda_graphs()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a CUDA GPU")
def test_cuda_graphs_refuses_to_run_without_a_cuda_gpu(tmp_path):
    with pytest.raises(ValueError, match=r"--cuda_graphs .* needs a CUDA GPU: torch.cuda.is_available\(\) is False"):
        parse(tmp_path, "--cuda_graphs")


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
