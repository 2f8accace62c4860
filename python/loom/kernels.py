"""KernelConfig as upstream's: a mapping of layer name → kernel ("repo:Kernel", a dict
per device, or (kernel, {"version": n})), and tuples of (layer, module-path pattern)
pairs → a fused kernel. Validated by loom's parser (errors name the entry)."""
import json

from . import _loom


def _kernel_value(value):
    if isinstance(value, tuple):
        return list(value)
    return value


class KernelConfig:
    def __init__(self, kernel_mapping=None, use_fallback=True):
        self.kernel_mapping = dict(kernel_mapping or {})
        self.use_fallback = use_fallback
        _loom._validate_kernel_config(self.to_json_string())

    @classmethod
    def builtin(cls):
        """loom's built-in kernel for every layer that has one: what use_kernels=True
        applies when no kernel_config is given."""
        return cls({layer: kernel for layer, kernel in _loom._builtin_kernel_layers().items()})

    def to_dict(self):
        layers, fusions = {}, []
        for key, value in self.kernel_mapping.items():
            if isinstance(key, tuple):
                fusions.append([[list(pair) for pair in key], _kernel_value(value)])
            elif isinstance(key, str):
                layers[key] = _kernel_value(value)
            else:
                raise ValueError(f"KernelConfig: key {key!r} is neither a layer name nor a tuple of (layer, pattern)")
        out = dict(layers)
        if fusions:
            out["fusions"] = fusions
        out["use_fallback"] = bool(self.use_fallback)
        return out

    def to_json_string(self):
        return json.dumps(self.to_dict())

    def __repr__(self):
        return f"KernelConfig({self.to_json_string()})"
