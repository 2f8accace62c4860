"""AutoModelForCausalLM: a loom model with Transformers' methods — __call__ (logits as
numpy), generate, generate_batch and the continuous batching entry points,
save_pretrained, explain_kernels. numpy in, numpy out; no torch."""
import contextlib
import json
import os
import weakref

import numpy as np

from . import _loom
from .constraints import pop_constraint
from .configuration import ContinuousBatchingConfig, GenerationConfig, PretrainedConfig
from .continuous_batching import ContinuousBatchingManager, _models
from .kernels import KernelConfig

_DTYPES = {"auto", "float32", "bfloat16", "float16"}


class CausalLMOutput:
    """`logits`: float32 [batch, sequence, vocab]."""

    def __init__(self, logits):
        self.logits = logits

    def __getitem__(self, key):
        return getattr(self, key)


def _rows(input_ids, attention_mask=None):
    """input_ids (list, list of lists, or a 1-D/2-D array) → rows of ints, padding
    (attention_mask 0) removed, and the positions each row's tokens came from."""
    ids = np.asarray(input_ids)
    if ids.dtype == object or ids.ndim not in (1, 2):
        raise ValueError("input_ids must be a list of token ids or a 2-D [batch, sequence] array")
    if ids.ndim == 1:
        ids = ids[None, :]
    if ids.size and not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"input_ids must hold integers, not {ids.dtype}")
    if attention_mask is None:
        return [row.tolist() for row in ids], None
    mask = np.asarray(attention_mask)
    if mask.ndim == 1:
        mask = mask[None, :]
    if mask.shape != ids.shape:
        raise ValueError(f"attention_mask has shape {mask.shape}, input_ids {ids.shape}")
    keep = mask != 0
    return [ids[b][keep[b]].tolist() for b in range(ids.shape[0])], keep


class LoomForCausalLM:
    def __init__(self, handle, path, kernel_config):
        self._handle = handle
        self.name_or_path = path
        if os.path.isdir(path):
            self.config = PretrainedConfig.from_pretrained(path)
            self.generation_config = GenerationConfig.from_pretrained(path)
        else:  # a GGUF file: config.json as made from its metadata, loom's generation defaults
            self.config = PretrainedConfig(json.loads(handle.config_json))
            self.generation_config = GenerationConfig(
                **{k: v for k, v in self.config.to_dict().items()
                   if k in ("bos_token_id", "eos_token_id", "pad_token_id")})
        self.kernel_config = kernel_config
        _models.add(self)

    # ── forward ──
    def __call__(self, input_ids, attention_mask=None, **kwargs):
        if kwargs:
            raise TypeError(f"unsupported arguments: {', '.join(sorted(kwargs))}")
        rows, keep = _rows(input_ids, attention_mask)
        packed = np.asarray(self._handle.forward(rows))  # a view of loom's buffer, no copy
        vocab = packed.shape[1]
        if keep is None:
            return CausalLMOutput(packed.reshape(len(rows), -1, vocab))
        logits = np.zeros((len(rows), keep.shape[1], vocab), dtype=np.float32)
        start = 0
        for b, row in enumerate(rows):
            logits[b, keep[b]] = packed[start:start + len(row)]
            start += len(row)
        return CausalLMOutput(logits)

    forward = __call__

    # ── generation ──
    def _generation_config(self, generation_config, kwargs):
        config = (generation_config or self.generation_config).copy()
        unused = config.update(**kwargs)
        if unused:
            raise ValueError(f"generate: unknown generation arguments {', '.join(sorted(unused))}")
        return config

    def generate(self, input_ids=None, generation_config=None, streamer=None, tokenizer=None, seed=None,
                 attention_mask=None, kv_cache_dtype="float32", cache_type_k=None, cache_type_v=None,
                 kv_cache_rotation="auto", **kwargs):
        """Each row of `input_ids` (padding removed) is one request; returns prompt +
        generated ids, int64 [batch, length], shorter rows padded with pad_token_id.
        kv_cache_dtype ("float32", "bfloat16", "float16", "q8_0", "q4_0") is the KV cache's
        type for K and V; cache_type_k / cache_type_v override it for one of them;
        kv_cache_rotation "auto" (a q4_0 K or V is Hadamard-rotated), "on" or "off"."""
        if input_ids is None:
            raise ValueError("generate needs input_ids")
        constraint = pop_constraint(self._handle, kwargs)
        config = self._generation_config(generation_config, kwargs)
        if config.stop_strings and tokenizer is None:
            raise ValueError("stop_strings need tokenizer= (the model's tokenizer) to match text")
        rows, _ = _rows(input_ids, attention_mask)
        if streamer is not None and len(rows) > 1:
            raise ValueError("streamers support batch size 1 only")
        gc_json = json.dumps(config._loom_dict())
        engine_tok = tokenizer._tok if tokenizer is not None else None
        on_token = None
        if streamer is not None:
            streamer.put(np.asarray(rows[0], dtype=np.int64))
            on_token = lambda token: streamer.put(np.array([token], dtype=np.int64))
        sequences = []
        try:
            for row in rows:
                r = self._handle.generate(row, gc_json, seed, on_token, engine_tok, kv_cache_dtype, constraint,
                                          cache_type_k, cache_type_v, kv_cache_rotation)
                sequences.append(r["sequence"])
        finally:
            if streamer is not None:
                streamer.end()
        pad = config.pad_token_id
        if pad is None:
            pad = self._handle.pad_token_id
        if pad is None:
            eos = config.eos_token_id if config.eos_token_id is not None else self._handle.eos_token_ids
            pad = (eos[0] if isinstance(eos, list) and eos else eos) or 0
        longest = max(len(s) for s in sequences)
        out = np.full((len(sequences), longest), pad, dtype=np.int64)
        for b, s in enumerate(sequences):
            out[b, :len(s)] = s
        return out

    # ── continuous batching ──
    def _cb_config(self, continuous_batching_config):
        if continuous_batching_config is None:
            return ContinuousBatchingConfig()
        if isinstance(continuous_batching_config, dict):
            return ContinuousBatchingConfig(**continuous_batching_config)
        return continuous_batching_config

    def generate_batch(self, inputs, generation_config=None, continuous_batching_config=None, record_timestamps=False,
                       progress_bar=False, persistent_manager=False, warmup=True, **kwargs):
        """Transformers' generate_batch: {request_id: GenerationOutput}, in input order.
        A constraint argument (response_format=, json_schema=, regex=, …) applies to every input."""
        constraint = pop_constraint(self._handle, kwargs)
        config = self._generation_config(generation_config, kwargs)
        cb = self._cb_config(continuous_batching_config)
        batch = []
        for i, ids in enumerate(inputs):
            ids = np.asarray(ids)
            if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
                raise ValueError(f"inputs[{i}] must be a list of token ids")
            options = _loom._RequestOptions()
            options.constraint = constraint
            batch.append(_loom._BatchInput(ids.tolist(), options))
        outputs = _loom._generate_batch(self._handle, batch, json.dumps(config._loom_dict()), cb.to_json_string(),
                                        record_timestamps, progress_bar, persistent_manager, warmup)
        return {o.request_id: o for o in outputs}

    def init_continuous_batching(self, generation_config=None, continuous_batching_config=None, **kwargs):
        """A ContinuousBatchingManager (not started: call start(), or use it as a context manager)."""
        config = self._generation_config(generation_config, kwargs)
        cb = self._cb_config(continuous_batching_config)
        engine = _loom._Manager.create(self._handle, json.dumps(config._loom_dict()), cb.to_json_string())
        return ContinuousBatchingManager(engine, self._handle)

    @contextlib.contextmanager
    def continuous_batching_context_manager(self, generation_config=None, continuous_batching_config=None,
                                            block=True, timeout=None, **kwargs):
        manager = self.init_continuous_batching(generation_config, continuous_batching_config, **kwargs)
        manager.start()
        try:
            yield manager
        finally:
            manager.stop(block=block, timeout=timeout)
            manager.destroy()

    def destroy_cached_continuous_batching_manager(self):
        _loom._destroy_persistent_manager(self._handle)

    # ── the rest ──
    def save_pretrained(self, save_directory):
        """The checkpoint in its original layout (weights converted back), plus its side files."""
        self._handle.save_pretrained(os.fspath(save_directory))

    def explain_kernels(self):
        """Per module: the kernel the KernelConfig picked and why — what `loom kernels --explain` prints."""
        return "\n".join(self._handle.explain_kernels()) + "\n"

    @property
    def num_threads(self):
        return self._handle.num_threads

    @property
    def vocab_size(self):
        return self._handle.vocab_size

    def __repr__(self):
        return f"LoomForCausalLM('{self.name_or_path}', model_type={getattr(self.config, 'model_type', None)!r})"


def _check_device_map(device_map):
    """loom runs on the CPU: device_map may say so ("auto", "cpu", {"": "cpu"}), nothing else."""
    if device_map is None or device_map in ("auto", "cpu"):
        return
    if isinstance(device_map, dict) and device_map and all(str(v) == "cpu" for v in device_map.values()):
        return
    raise ValueError(f"device_map={device_map!r}: loom runs on the CPU; use 'auto' or 'cpu'")


class AutoModelForCausalLM:
    @staticmethod
    def from_pretrained(pretrained_model_name_or_path, dtype="auto", kernel_config=None, trust_remote_code=False,
                        matmul_precision=None, num_threads=None, plugin_dirs=None, backend="cpu", torch_dtype=None,
                        quantize=None, tensor_parallel=None, use_kernels=None, device_map=None, **kwargs):
        """loom runs weights as the checkpoint stores them (f32, bf16, f16): dtype must be
        "auto" or name that dtype. num_threads: this model's own worker threads (default:
        the process's pool, all cores or LOOM_NUM_THREADS). matmul_precision is process-wide,
        as torch.set_float32_matmul_precision. The path may be a .gguf file (llama.cpp's
        format); quantize ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k_m", "q5_k_m", "q6_k",
        "iq4_nl", "mxfp4") quantizes the weights as they load, with llama.cpp's recipes,
        cached in LOOM_CACHE_DIR (~/.cache/loom) so that later loads map them
        (docs/quantization.md).

        tensor_parallel=N splits the model over the N processes of `mpirun -np N python3
        script.py` (docs/python.md): every rank runs the script and loads its shard; on
        rank 0 from_pretrained returns the model, which drives every step; on the other
        ranks it follows rank 0's steps and then ends the process (SystemExit(0)) once
        rank 0's model is released or its script ends.

        use_kernels and device_map as the kernels guide writes them: use_kernels=True
        applies kernel_config, or without one loom's built-in kernels (every layer that has
        one: KernelConfig.builtin()); use_kernels=False refuses a kernel_config (unset: the
        kernel_config decides). device_map may be "auto", "cpu" or a mapping onto "cpu":
        loom runs on the CPU."""
        if kwargs:
            raise TypeError(f"from_pretrained: unsupported arguments {', '.join(sorted(kwargs))}")
        path = os.fspath(pretrained_model_name_or_path)
        dtype = torch_dtype if torch_dtype is not None else dtype
        dtype = str(dtype).replace("torch.", "")
        if dtype not in _DTYPES:
            raise ValueError(f"dtype={dtype!r}: use 'auto' (loom runs the checkpoint's own dtype)")
        if dtype != "auto" and os.path.isdir(path):
            stored = PretrainedConfig.from_pretrained(path).to_dict()
            stored = stored.get("dtype", stored.get("torch_dtype"))
            if stored is not None and stored != dtype:
                raise ValueError(f"dtype={dtype!r}: this checkpoint stores {stored} and loom runs weights as stored "
                                 "(use dtype='auto')")
        if matmul_precision is not None:
            _loom._set_matmul_precision(matmul_precision)
        _check_device_map(device_map)
        if isinstance(kernel_config, dict):
            kernel_config = KernelConfig(kernel_config)
        if kernel_config is not None and not isinstance(kernel_config, KernelConfig):
            raise TypeError("kernel_config must be a loom.KernelConfig or a mapping")
        if use_kernels is not None and not isinstance(use_kernels, bool):
            raise TypeError(f"use_kernels must be True or False, not {use_kernels!r}")
        if use_kernels is False and kernel_config is not None:
            raise ValueError("from_pretrained: kernel_config is given but use_kernels=False "
                             "(pass use_kernels=True, or leave it unset)")
        if use_kernels and kernel_config is None:
            kernel_config = KernelConfig.builtin()
        handle = _loom._Model.load(path, kernel_config.to_json_string() if kernel_config else "",
                                   list(plugin_dirs or []), trust_remote_code, backend, int(num_threads or 0),
                                   quantize or "", int(tensor_parallel or 0))
        if tensor_parallel and not handle.leads_steps:
            handle.follow_steps()  # until rank 0 ends them
            raise SystemExit(0)
        model = LoomForCausalLM(handle, path, kernel_config)
        if tensor_parallel:
            # The other ranks stop when this model goes or the script ends.
            weakref.finalize(model, handle.end_steps)
        return model


def load_program(path, num_threads=None, backend="cpu"):
    """A program written by exporters.DynamoExporter (or `loom export --format program`),
    loaded as a model: generate, generate_batch and the continuous batching manager run
    its graph and weights. Its folder carries the checkpoint's config, generation config
    and tokenizer files, so AutoTokenizer.from_pretrained(path) works on it too."""
    path = os.fspath(path)
    if not os.path.isfile(os.path.join(path, "program.json")):
        raise _loom.NotFoundError(f"load_program: '{path}' holds no program.json (not an exported program)")
    return AutoModelForCausalLM.from_pretrained(path, num_threads=num_threads, backend=backend)
