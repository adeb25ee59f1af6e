"""run_ner.py's main() with a trainer whose callback appends the global step after every optimizer step of this
process to a file and, given a step > 0, SIGKILLs the process right after that step's checkpoint is saved: a hard kill
mid-run at a deterministic point (test_run_distributed.py). Its first two arguments are the steps file and the kill
step (0: none), the rest run_ner.py's.

    python run_ner_recording_steps_then_killed.py STEPS_FILE KILL_STEP RUN_NER_ARGUMENTS...
"""

import os
import signal
import sys

from transformers import TrainerCallback

from run_scripts import run_ner

steps_file, kill_step = sys.argv[1], int(sys.argv[2])


class RecordStepsThenKill(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        with open(steps_file, "a") as file:
            file.write(f"{state.global_step}\n")

    def on_save(self, args, state, control, **kwargs):
        if kill_step and state.global_step >= kill_step:
            print(f"killing the run after saving step {state.global_step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)


class InstrumentedTrainer(run_ner.SLSTMTrainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.add_callback(RecordStepsThenKill())


run_ner.SLSTMTrainer = InstrumentedTrainer
sys.argv = ["run_ner.py", *sys.argv[3:]]
run_ner.main()
