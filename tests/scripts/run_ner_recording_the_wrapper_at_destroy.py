"""run_ner.py's main() with a trainer that records, in each process, whether its model wrapper is still alive when
`SLSTMTrainer.end()` destroys the process group (test_run_distributed.py). Its arguments are run_ner.py's.

    torchrun --nproc_per_node 2 run_ner_recording_the_wrapper_at_destroy.py RUN_NER_ARGUMENTS...
"""

import sys
import weakref

import torch.distributed

from run_scripts import run_ner


class InstrumentedTrainer(run_ner.SLSTMTrainer):
    def end(self):
        name, wrapper = type(self.model_wrapped).__name__, weakref.ref(self.model_wrapped)
        destroy = torch.distributed.destroy_process_group

        def recording_destroy(*args, **kwargs):
            print(f"{name} alive at destroy_process_group: {wrapper() is not None}", flush=True)
            return destroy(*args, **kwargs)

        torch.distributed.destroy_process_group = recording_destroy
        super().end()


run_ner.SLSTMTrainer = InstrumentedTrainer
sys.argv = ["run_ner.py", *sys.argv[1:]]
run_ner.main()
