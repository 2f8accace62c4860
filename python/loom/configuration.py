"""GenerationConfig, ContinuousBatchingConfig and the model's config.json, as upstream's
classes: plain attributes, to_dict(), from_pretrained(). loom's C++ readers validate the
values, so a bad one raises ValueError naming the field."""
import json
import os

from . import _loom

# The GenerationConfig fields loom implements (Transformers' names and defaults).
_GENERATION_DEFAULTS = {
    "max_new_tokens": None,
    "max_length": 20,
    "do_sample": False,
    "temperature": 1.0,
    "top_k": 50,
    "top_p": 1.0,
    "min_p": None,
    "repetition_penalty": 1.0,
    "num_return_sequences": 1,
    "eos_token_id": None,
    "bos_token_id": None,
    "pad_token_id": None,
    "stop_strings": None,
    "seed": None,
    "prompt_lookup_num_tokens": None,
}


class GenerationConfig:
    """Transformers' GenerationConfig for the options loom implements (plus `seed`).
    Other keyword arguments are kept as attributes, as upstream does, and ignored."""

    def __init__(self, **kwargs):
        for key, default in _GENERATION_DEFAULTS.items():
            setattr(self, key, kwargs.pop(key, default))
        for key, value in kwargs.items():
            setattr(self, key, value)
        self.validate()

    @classmethod
    def from_pretrained(cls, path, config_file_name="generation_config.json", **kwargs):
        """`path`/generation_config.json (defaults when the folder has none), then kwargs."""
        if not os.path.isdir(path) and not os.path.isfile(path):
            raise FileNotFoundError(f"'{path}' does not exist")
        file = path if os.path.isfile(path) else os.path.join(path, config_file_name)
        values = {}
        if os.path.isfile(file):
            with open(file, encoding="utf-8") as f:
                values = json.load(f)
        values.update(kwargs)
        return cls(**values)

    def validate(self):
        _loom._validate_generation_config(json.dumps(self._loom_dict()))

    def _loom_dict(self):
        return {key: getattr(self, key) for key in _GENERATION_DEFAULTS}

    def to_dict(self):
        return dict(vars(self))

    def update(self, **kwargs):
        """Sets the known attributes among kwargs; returns the others (as upstream)."""
        unused = {}
        for key, value in kwargs.items():
            if key in _GENERATION_DEFAULTS or key in vars(self):
                setattr(self, key, value)
            else:
                unused[key] = value
        self.validate()
        return unused

    def copy(self):
        return GenerationConfig(**self.to_dict())

    def __eq__(self, other):
        return isinstance(other, GenerationConfig) and self.to_dict() == other.to_dict()

    def __repr__(self):
        return f"GenerationConfig({json.dumps(self._loom_dict())})"


def _cb_defaults():
    return json.loads(_loom._continuous_batching_config_defaults())


class ContinuousBatchingConfig:
    """Every field of Transformers' ContinuousBatchingConfig (and loom's: kv_cache_dtype,
    cpu_offload_path, max_queue_size, adaptive_speculation), with upstream's defaults. GPU-only fields are
    accepted and have no effect (see cpu_no_op_fields()). An unknown field or a bad
    value raises ValueError naming it."""

    def __init__(self, **kwargs):
        fields = _cb_defaults()
        unknown = sorted(set(kwargs) - set(fields))
        if unknown:
            raise ValueError(f"ContinuousBatchingConfig: unknown field(s) {', '.join(unknown)}")
        fields.update(kwargs)
        if isinstance(fields.get("use_cuda_graph"), tuple):
            fields["use_cuda_graph"] = list(fields["use_cuda_graph"])
        for key, value in fields.items():
            setattr(self, key, value)
        self.validate()

    @classmethod
    def fields(cls):
        return list(_cb_defaults())

    def to_dict(self):
        return {key: getattr(self, key) for key in _cb_defaults()}

    def to_json_string(self):
        return json.dumps({k: v for k, v in self.to_dict().items() if v is not None})

    def validate(self):
        _loom._validate_continuous_batching_config(self.to_json_string())

    def cpu_no_op_fields(self):
        return list(_loom._continuous_batching_config_no_op_fields(self.to_json_string()))

    def __repr__(self):
        return f"ContinuousBatchingConfig({self.to_json_string()})"


class PretrainedConfig:
    """config.json as attributes (model_type, hidden_size, vocab_size, …)."""

    def __init__(self, values):
        self._values = dict(values)
        for key, value in values.items():
            setattr(self, key, value)

    @classmethod
    def from_pretrained(cls, path):
        file = os.path.join(path, "config.json")
        if not os.path.isfile(file):
            raise FileNotFoundError(f"'{file}' does not exist")
        with open(file, encoding="utf-8") as f:
            return cls(json.load(f))

    def to_dict(self):
        return dict(self._values)

    def __repr__(self):
        return f"PretrainedConfig({json.dumps(self._values)})"
