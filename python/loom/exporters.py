"""loom's exporters with Transformers' names: DynamoExporter (a loom program, torch.export's
counterpart), OnnxExporter (Optimum's decoder signature), ExecutorchExporter (a portable
.lpte program). register_patch / register_fx_node_fix / register_fx_program_fix register
Python functions into loom's export pipeline, as upstream's decorators do; they see and
rewrite loom's graph and change the file written.

Backend names: "dynamo" (or loom's "program"), "onnx", "executorch" (or "portable")."""
import dataclasses
import os

from . import _loom

_BACKENDS = {"dynamo": "program", "program": "program", "onnx": "onnx", "executorch": "portable",
             "portable": "portable"}


def _backend(name):
    try:
        return _BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown export backend {name!r}: use dynamo, onnx or executorch") from None


# ── the graph as fixes see it ──
class Node:
    """One node of loom's graph: op, attrs (a dict snapshot; set_attr writes), inputs and
    outputs (value ids), scope (the module path that recorded it)."""

    def __init__(self, graph, node_id):
        self.graph = graph
        self.id = node_id

    @property
    def op(self):
        return self.graph._g.op(self.id)

    @property
    def attrs(self):
        return self.graph._g.attrs(self.id)

    @property
    def inputs(self):
        return self.graph._g.inputs(self.id)

    @property
    def outputs(self):
        return self.graph._g.outputs(self.id)

    @property
    def scope(self):
        return self.graph._g.scope(self.id)

    def set_attr(self, key, value):
        self.graph._g.set_attr(self.id, key, value)

    def __repr__(self):
        return f"Node({self.id}, op={self.op!r}, scope={self.scope!r})"


class Graph:
    """loom's graph during one fix: valid only while the fix runs."""

    def __init__(self, engine_graph):
        self._g = engine_graph

    @property
    def num_nodes(self):
        return self._g.num_nodes

    def node(self, node_id):
        return Node(self, node_id)

    @property
    def nodes(self):
        return [Node(self, i) for i in range(self._g.num_nodes)]

    def value(self, value_id):
        """{id, name, kind, dtype, shape, producer} of a value."""
        return self._g.value(value_id)

    def add_node(self, op, inputs, attrs=None, scope=""):
        """Records a node of loom op `op` (shape inference checks the inputs); returns its output ids."""
        return self._g.add_node(op, list(inputs), dict(attrs or {}), scope)

    def replace_uses(self, old, new):
        """Every use of value `old` reads `new` instead — except the node computing `new`."""
        self._g.replace_uses(old, new)

    def outputs(self):
        return dict(self._g.outputs_by_name())

    def __str__(self):
        return self._g.to_string()


class Program:
    """The exported program during a program fix: graph, signature, dims, metadata."""

    def __init__(self, engine_program, engine_graph):
        self._p = engine_program
        self.graph = Graph(engine_graph)

    @property
    def input_names(self):
        return self._p.input_names

    @property
    def output_names(self):
        return self._p.output_names

    @property
    def dims(self):
        return self._p.dims()

    def set_dim(self, name, min, max):
        self._p.set_dim(name, min, max)

    @property
    def metadata(self):
        return self._p.metadata()

    def set_metadata(self, key, value):
        self._p.set_metadata(key, str(value))


# ── registries ──
class _Registration:
    """A registered Python function; unregister() turns it off (loom's registry is
    process-wide and append-only, so the entry stays and does nothing)."""

    def __init__(self, fn):
        self.fn = fn
        self.active = True


_registrations = {}


def unregister(fn):
    """Turns off a function registered with one of the decorators below."""
    for r in _registrations.pop(id(fn), []):
        r.active = False


def _remember(fn, registration):
    _registrations.setdefault(id(fn), []).append(registration)


def register_fx_node_fix(backend, op=None, name=None):
    """Decorator: fn(graph, node) -> bool rewrites single nodes of the captured graph for
    `backend` (True: it rewrote the node). op: the loom op it applies to (default: all)."""
    loom_backend = _backend(backend)

    def decorate(fn):
        registration = _Registration(fn)
        _remember(fn, registration)

        def run(engine_graph, node_id):
            if not registration.active:
                return False
            return bool(fn(Graph(engine_graph), Node(Graph(engine_graph), node_id)))

        ops = [op] if isinstance(op, str) else list(op) if op else list(_loom._op_names())
        for o in ops:
            _loom._register_node_fix(loom_backend, o, name or fn.__name__, run)
        return fn

    return decorate


def register_fx_program_fix(backend, name=None):
    """Decorator: fn(program) rewrites the whole exported program (graph, dims, metadata)."""
    loom_backend = _backend(backend)

    def decorate(fn):
        registration = _Registration(fn)
        _remember(fn, registration)

        def run(engine_program, engine_graph):
            if registration.active:
                fn(Program(engine_program, engine_graph))

        _loom._register_program_fix(loom_backend, name or fn.__name__, run)
        return fn

    return decorate


def _forward_signature(path):
    """The patch point's signature by its class name (loom's naming): attention and
    decoder layers take (x, positions), every other module x."""
    cls = path[len("models."):-len(".forward")]
    if cls.endswith("Attention"):
        return "attention"
    if cls.endswith("DecoderLayer"):
        return "decoder_layer"
    return "unary"


def register_patch(backend, *paths, name=None, signature=None):
    """Decorator on a factory: factory(original) returns the replacement for one export.

    - "models.<Class>.forward" (e.g. "models.LlamaMLP.forward"): replacement(module, builder,
      x) — attention and decoder layers (module, builder, x, positions) — returns the output
      value id; module has path, class_name, layer_name. signature= ("unary", "attention",
      "decoder_layer") overrides the choice made from the class name.
    - "ops.<op>" (e.g. "ops.softcap"): replacement(builder, inputs, attrs).

    builder.record(op, inputs, attrs) records a node past any patch; calling `original`
    records what the model would have."""
    loom_backend = _backend(backend)
    if not paths:
        raise ValueError("register_patch needs at least one path (\"models.<Class>.forward\" or \"ops.<op>\")")

    def decorate(factory):
        registration = _Registration(factory)
        _remember(factory, registration)

        def make(original):
            if not registration.active:
                return original
            return factory(original)

        op_paths = [p for p in paths if p.startswith("ops.")]
        by_signature = {}
        for p in paths:
            if not p.startswith("ops."):
                by_signature.setdefault(signature or _forward_signature(p), []).append(p)
        if op_paths:
            _loom._register_patch(loom_backend, name or factory.__name__, op_paths, make)
        for sig, group in by_signature.items():
            _loom._register_forward_patch(loom_backend, name or factory.__name__, group, sig, make)
        return factory

    return decorate


# ── exporters ──
@dataclasses.dataclass
class DynamoConfig:
    """dynamic: keep token and sequence counts symbolic, within dynamic_shapes
    ({dim: (min, max)}); else fixed to static_sizes ({"tokens": n, "sequences": m})."""
    dynamic: bool = True
    dynamic_shapes: dict = dataclasses.field(default_factory=dict)
    static_sizes: dict = dataclasses.field(default_factory=dict)
    strict: bool = False


@dataclasses.dataclass
class OnnxConfig:
    """ops: "standard" (plain ONNX) or "ort" (ONNX Runtime contrib ops). dynamic: named
    dims batch_size, sequence_length, past_sequence_length; else the sizes below."""
    opset: int = dataclasses.field(default_factory=lambda: _loom._onnx_default_opset())
    ops: str = "standard"
    dynamic: bool = True
    batch_size: int = 1
    sequence_length: int = 1
    past_length: int = 0
    optimize: bool = True
    external_data_threshold: int = 1024
    strict: bool = False


@dataclasses.dataclass
class ExecutorchConfig:
    """backend: the portable runtime's preparation (reference, cpu_simd); max_tokens per
    chunk; max_positions of the KV cache (0: the model's, at most 4096)."""
    backend: str = "reference"
    max_tokens: int = 32
    max_positions: int = 0
    dynamic: bool = True
    keep_bf16: bool = True
    strict: bool = False


class _Exporter:
    config_class = None

    def __init__(self, config=None):
        self.config = config if config is not None else self.config_class()
        if not isinstance(self.config, self.config_class):
            raise TypeError(f"{type(self).__name__} takes a {self.config_class.__name__}")
        self.report = []


class DynamoExporter(_Exporter):
    """Writes a loom program (a folder loom loads and runs)."""
    config_class = DynamoConfig

    def export(self, model, path):
        c = self.config
        ranges = {k: tuple(v) for k, v in c.dynamic_shapes.items()}
        self.report = list(_loom._export_program(model._handle, os.fspath(path), c.dynamic, ranges,
                                                 dict(c.static_sizes), c.strict))
        return path


class OnnxExporter(_Exporter):
    """Writes an .onnx file (+ .data for large weights) ONNX Runtime runs."""
    config_class = OnnxConfig

    def export(self, model, path):
        c = self.config
        self.report = list(_loom._export_onnx(model._handle, os.fspath(path), c.opset, c.ops, c.dynamic, c.batch_size,
                                              c.sequence_length, c.past_length, c.strict, c.optimize,
                                              c.external_data_threshold))
        return path


class ExecutorchExporter(_Exporter):
    """Writes a portable program (.lpte) for loom_portable, which has no dependency on loom."""
    config_class = ExecutorchConfig

    def export(self, model, path):
        c = self.config
        self.report = list(_loom._export_portable(model._handle, os.fspath(path), c.backend, c.max_tokens,
                                                  c.max_positions, c.dynamic, c.keep_bf16, c.strict))
        return path
