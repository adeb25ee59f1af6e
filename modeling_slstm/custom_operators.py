"""Names of the package's custom operators (`torch.library.custom_op`): the oneDNN matmul of `cpu_matmul.py` and the
Triton kernels' launchers (`kernel_dispatch.py` says where those kernels run).

An operator name can be registered only once per process, and `trust_remote_code` imports a checkpoint's copy of
this package beside the installed one: each copy registers its operators in a namespace of its own, made from the
copy's module path.
"""

import re

OPERATOR_NAMESPACE = "slstm_" + re.sub(r"\W", "_", __name__.rpartition(".")[0] or __name__)


def operator_name(name: str) -> str:
    """`name` as a qualified operator name of this copy of the package, `"<namespace>::<name>"`."""
    return f"{OPERATOR_NAMESPACE}::{name}"
