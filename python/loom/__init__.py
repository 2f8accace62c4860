"""loom: Hugging Face checkpoints on the CPU with Transformers' Python names.

    import loom
    tok = loom.AutoTokenizer.from_pretrained(path)
    model = loom.AutoModelForCausalLM.from_pretrained(path)
    out = model.generate(tok("In the beginning", return_tensors="np")["input_ids"], max_new_tokens=20)
    print(tok.decode(out[0]))

The compiled engine is loom._loom; everything here is a thin façade over it.
"""
from . import _loom
from ._loom import (
    CancelledError,
    FailedPreconditionError,
    GenerationOutput,
    InvalidArgumentError,
    IoError,
    LoomError,
    LoomTimeoutError,
    NotFoundError,
    RequestStatus,
    ResourceExhaustedError,
)
from .configuration import ContinuousBatchingConfig, GenerationConfig, PretrainedConfig
from .continuous_batching import ContinuousBatchingManager
from .kernels import KernelConfig
from .modeling import AutoModelForCausalLM, CausalLMOutput, LoomForCausalLM, load_program
from .streamers import BaseStreamer, TextIteratorStreamer, TextStreamer
from .tokenization import AutoTokenizer, BatchEncoding, PreTrainedTokenizer
from . import exporters

__version__ = _loom.__version__

# A manager destroyed from its own result handler finishes tearing down on a thread of
# its own; the interpreter must not finalize under it.
import atexit as _atexit

_atexit.register(_loom._wait_for_teardowns, 30.0)

__all__ = [
    "AutoModelForCausalLM", "AutoTokenizer", "BaseStreamer", "BatchEncoding", "CancelledError", "CausalLMOutput",
    "ContinuousBatchingConfig", "ContinuousBatchingManager", "FailedPreconditionError", "GenerationConfig",
    "GenerationOutput", "InvalidArgumentError", "IoError", "KernelConfig", "LoomError", "LoomForCausalLM",
    "LoomTimeoutError", "NotFoundError", "PreTrainedTokenizer", "PretrainedConfig", "RequestStatus",
    "ResourceExhaustedError", "TextIteratorStreamer", "TextStreamer", "exporters", "load_program",
]
