"""CPU inference on the idle cores (`modeling_slstm/cpu_threads.py`, `config.inference_threads`): the thread count
inside every model's forward is the one the idle cores allow (read from stand-in /proc/stat counters), measured again
without sleeping; the caller's count comes back, also when forward raises; a count the caller chose is kept; training
and compiled code are left alone; the setting is saved, loaded and checked."""

import pytest
import torch
from helpers import BIO_LABELS, pad, random_ids, tagger_config, word_tagger
from transformers import PreTrainedModel, pipeline

import baselines.modeling_baselines
import modeling_slstm.modeling_slstm
from baselines import BaselineEncoderConfig
from modeling_slstm import SLSTMConfig, SLSTMForTokenClassification, SLSTMModel, cpu_threads
from modeling_slstm.cpu_threads import CpuSnapshot
from modeling_slstm.modeling_slstm import SLSTMEmbeddings

# Every model class of the package and of the baselines (the bases aside): each owns a `forward` that must run on the
# idle cores.
MODEL_CLASSES = [
    model_class
    for module in (modeling_slstm.modeling_slstm, baselines.modeling_baselines)
    for name, model_class in vars(module).items()
    if isinstance(model_class, type)
    and issubclass(model_class, PreTrainedModel)
    and model_class.__module__ == module.__name__
    and name == model_class.__name__  # not a module-level alias
    and "PreTrained" not in name
]
PROCESS_DEFAULT = 3  # the stand-in machine's PyTorch default: three usable cores
TICKS_PER_WINDOW = 100


def model_config(model_class, **overrides):
    labels = {"id2label": dict(enumerate(BIO_LABELS)), "label2id": {label: i for i, label in enumerate(BIO_LABELS)}}
    if model_class.__module__ == baselines.modeling_baselines.__name__:
        settings = {"encoder_type": "bilstm", "num_layers": 1, "vocab_size": 20, "embedding_dim": 5, "hidden_size": 6}
        return BaselineEncoderConfig(**settings, **labels, **overrides)
    return tagger_config(**overrides)


def build_model(model_class=SLSTMForTokenClassification, **overrides):
    torch.manual_seed(0)
    return model_class(model_config(model_class, **overrides)).eval()


def batch() -> dict:
    input_ids, attention_mask = pad(random_ids([7, 4]))
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def record_forward_threads(model) -> list[int]:
    """The thread count inside every later forward of `model` (at its word representations), in call order."""
    counts = []
    embeddings = next(module for module in model.modules() if isinstance(module, SLSTMEmbeddings))
    embeddings.register_forward_pre_hook(lambda module, args: counts.append(torch.get_num_threads()))
    return counts


class StandInMachine:
    """Three usable cores whose `/proc/stat` counters `take_snapshot` reads: each reading after the first closes a
    window of `TICKS_PER_WINDOW` ticks per core, one second long, in which each core was idle for the share `windows`
    gives (the last window repeats); this process used no CPU. Counts the readings and the sleeps."""

    def __init__(self):
        self.windows = []
        self.ticks = {core: (0, 0) for core in range(PROCESS_DEFAULT)}
        self.readings = 0
        self.sleeps = []

    def then(self, *windows: tuple[float, ...]) -> None:
        self.windows.extend(windows)

    def take_snapshot(self) -> CpuSnapshot:
        if self.readings:
            shares = self.windows.pop(0) if len(self.windows) > 1 else self.windows[0]
            self.ticks = {
                core: (idle + round(share * TICKS_PER_WINDOW), total + TICKS_PER_WINDOW)
                for (core, (idle, total)), share in zip(self.ticks.items(), shares, strict=True)
            }
        self.readings += 1
        return CpuSnapshot(dict(self.ticks), own_cpu_s=0.0, wall_s=float(self.readings))


@pytest.fixture
def machine(monkeypatch):
    """The stand-in machine, with PyTorch at its default of `PROCESS_DEFAULT` threads, nothing in the environment that
    chooses a count, and a process that has not measured yet; the thread count of the test process comes back."""
    stand_in = StandInMachine()
    monkeypatch.setattr(cpu_threads, "take_snapshot", stand_in.take_snapshot)
    monkeypatch.setattr(cpu_threads, "usable_cores", lambda: set(range(PROCESS_DEFAULT)))
    monkeypatch.setattr(cpu_threads, "cgroup_cpu_limit", lambda: None)
    monkeypatch.setattr(cpu_threads.time, "sleep", stand_in.sleeps.append)
    monkeypatch.setattr(cpu_threads, "TORCH_DEFAULT_THREADS", PROCESS_DEFAULT)
    monkeypatch.setattr(cpu_threads, "INFERENCE_IDLE_CORES", cpu_threads.InferenceIdleCores())
    for variable in (*cpu_threads.THREAD_COUNT_VARIABLES, "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(variable, raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(PROCESS_DEFAULT)
    yield stand_in
    torch.set_num_threads(before)


ONE_CORE_BUSY = (1.0, 1.0, 0.0)
TWO_CORES_BUSY = (1.0, 0.0, 0.0)
IDLE = (1.0, 1.0, 1.0)


def test_every_model_class_is_covered():
    names = {model_class.__name__ for model_class in MODEL_CLASSES}
    assert {"SLSTMModel", "SLSTMForSequenceClassification", "SLSTMForTokenClassification"} <= names
    assert {"BaselineModel", "BaselineForSequenceClassification", "BaselineForTokenClassification"} <= names


@pytest.mark.parametrize("model_class", MODEL_CLASSES, ids=lambda model_class: model_class.__name__)
def test_cpu_inference_runs_on_the_idle_cores_and_gives_the_count_back(machine, model_class):
    machine.then(ONE_CORE_BUSY)
    model = build_model(model_class)
    counts = record_forward_threads(model)
    with torch.no_grad():
        model(**batch())
    model(**batch())  # eval mode with autograd on is inference too
    assert counts == [2, 2]
    assert torch.get_num_threads() == PROCESS_DEFAULT
    assert machine.sleeps == [cpu_threads.FIRST_INFERENCE_WINDOW_S]  # measured once, at the first call


def test_the_pipeline_runs_on_the_idle_cores(machine):
    machine.then(TWO_CORES_BUSY)
    model, tokenizer = word_tagger([["John", "lives", "in", "Paris"]])
    counts = record_forward_threads(model.eval())
    tagger = pipeline("token-classification", model=model, tokenizer=tokenizer)
    tagger("John lives in Paris")
    assert counts == [1]
    assert torch.get_num_threads() == PROCESS_DEFAULT


def test_the_count_follows_the_machine_without_sleeping_again(machine, monkeypatch):
    machine.then(IDLE, TWO_CORES_BUSY, ONE_CORE_BUSY)
    model = build_model()
    counts = record_forward_threads(model)
    monkeypatch.setattr(cpu_threads, "INFERENCE_RECHECK_INTERVAL_S", 0.0)  # every call reads the counters again
    for _ in range(3):
        model(**batch())
    assert counts == [3, 1, 2]
    assert machine.sleeps == [cpu_threads.FIRST_INFERENCE_WINDOW_S]


def test_the_counters_are_read_at_most_every_few_seconds(machine):
    machine.then(TWO_CORES_BUSY, IDLE)
    model = build_model()
    counts = record_forward_threads(model)
    for _ in range(3):
        model(**batch())  # well within the 2 s of INFERENCE_RECHECK_INTERVAL_S
    assert machine.readings == 2  # the first call's window, nothing since
    assert counts == [1, 1, 1]


def test_the_callers_count_comes_back_when_forward_raises(machine):
    machine.then(TWO_CORES_BUSY)
    model = build_model()
    counts = record_forward_threads(model)
    inputs = batch()
    with pytest.raises(ValueError, match="attention_mask must have the shape of the input"):
        model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"][:, :3])
    assert counts == [1]  # it raised inside the forward, after the count was set
    assert torch.get_num_threads() == PROCESS_DEFAULT


def set_threads(count):
    return lambda model, monkeypatch: torch.set_num_threads(count)


def set_environment(model, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", str(PROCESS_DEFAULT))


def set_config(value):
    return lambda model, monkeypatch: setattr(model.config, "inference_threads", value)


@pytest.mark.parametrize(
    "choose, inside, after",
    [
        (set_threads(2), 2, 2),  # torch.set_num_threads to other than the default
        (set_environment, PROCESS_DEFAULT, PROCESS_DEFAULT),  # OMP_NUM_THREADS
        (set_config("torch"), PROCESS_DEFAULT, PROCESS_DEFAULT),
        (set_config(PROCESS_DEFAULT), PROCESS_DEFAULT, PROCESS_DEFAULT),  # a number, even the default, is forced
        (set_config(2), 2, PROCESS_DEFAULT),
    ],
    ids=["set_num_threads", "OMP_NUM_THREADS", "torch", "number equal to the default", "number"],
)
def test_a_count_the_caller_chose_is_kept(machine, monkeypatch, choose, inside, after):
    machine.then(TWO_CORES_BUSY)  # the idle cores would say 1
    model = build_model()
    counts = record_forward_threads(model)
    choose(model, monkeypatch)
    model(**batch())
    assert counts == [inside]
    assert torch.get_num_threads() == after
    assert machine.readings == 0  # nothing measured


def test_training_is_left_alone(machine):
    machine.then(TWO_CORES_BUSY)
    model = build_model().train()
    counts = record_forward_threads(model)
    model(**batch()).logits.sum().backward()
    assert counts == [PROCESS_DEFAULT]
    assert machine.readings == 0
    with torch.no_grad():  # a training-mode forward without autograd is inference (e.g. sampling with dropout)
        model(**batch())
    assert counts == [PROCESS_DEFAULT, 1]


def test_compiled_code_is_left_alone(machine, monkeypatch):
    """A traced forward runs unchanged: a compiled graph guards on the thread count, so changing it around the call
    would compile again for every count."""
    machine.then(TWO_CORES_BUSY)
    model = build_model(SLSTMModel)
    set_counts = []
    monkeypatch.setattr(torch, "set_num_threads", set_counts.append)
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    with torch.no_grad():
        compiled(**batch())
    assert set_counts == []
    assert machine.readings == 0


def test_outputs_equal_those_of_one_thread(machine):
    """Where the idle cores allow one thread, the outputs are those of a one-thread run to the last bit (at this size
    three threads sum in another order: 5e-10 apart on an AVX-512 EPYC)."""
    machine.then(TWO_CORES_BUSY)
    model = build_model(SLSTMModel, hidden_size=64, embedding_dim=64)
    inputs = {"input_ids": torch.randint(4, 20, (32, 64))}  # drawn after the weights, from seed 0
    with torch.no_grad():
        on_idle_cores = model(**inputs).last_hidden_state
        torch.set_num_threads(1)
        one_thread = model(**inputs).last_hidden_state
    assert torch.equal(on_idle_cores, one_thread)


def test_the_setting_is_saved_loaded_and_checked(tmp_path):
    model = build_model(inference_threads=2)
    model.save_pretrained(tmp_path)
    assert SLSTMForTokenClassification.from_pretrained(tmp_path).config.inference_threads == 2
    loaded = SLSTMForTokenClassification.from_pretrained(tmp_path, inference_threads="torch")
    assert loaded.config.inference_threads == "torch"
    saved = SLSTMConfig.from_pretrained(tmp_path).to_dict()
    del saved["inference_threads"]  # a checkpoint saved before the setting existed
    assert SLSTMConfig.from_dict(saved).inference_threads == "auto"
    expected = "inference_threads must be 'auto', 'torch' or a positive number of threads, got "
    for bad in [0, -1, "two", 1.5, True, None]:
        with pytest.raises(ValueError, match=f"SLSTMConfig.{expected}{bad!r}"):
            SLSTMConfig(inference_threads=bad)
        with pytest.raises(ValueError, match=f"SLSTMConfig.{expected}"):
            model.config.inference_threads = bad
        with pytest.raises(ValueError, match=f"BaselineEncoderConfig.{expected}"):
            BaselineEncoderConfig(inference_threads=bad)
        with pytest.raises(ValueError, match=f"BaselineEncoderConfig.{expected}"):
            BaselineEncoderConfig().inference_threads = bad


def test_only_a_model_on_the_cpu_runs_cpu_inference():
    model = build_model()
    assert cpu_threads.runs_cpu_inference(model)
    assert not cpu_threads.runs_cpu_inference(model.to("meta"))  # as a model on a GPU: its device is not the CPU
