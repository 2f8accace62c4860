"""KernelConfig and explain_kernels against `loom kernels --explain`; the exporters, and
Python fixes registered into loom's export pipeline: a node fix changes the ONNX file,
and ONNX Runtime (onnxruntime-node) runs it."""
import json
import os
import subprocess

import numpy as np
import pytest

import loom
from loom import exporters
from conftest import SOURCE_DIR, fixture_dir, run_cli

KERNELS = {
    "RMSNorm": "loom:FusedRMSNorm",
    (("RMSNorm", "model.layers.1.post_attention_layernorm"), ("MLP", "model.layers.1.mlp")): "loom:RMSNormMLP",
}
NODE_MODULES = os.path.join(SOURCE_DIR, ".cache", "npm", "node_modules")
PROMPT = [5, 6, 7, 8, 9, 10]


def test_explain_kernels_equals_the_cli(tmp_path):
    config = loom.KernelConfig(KERNELS)
    path = tmp_path / "k.json"
    path.write_text(config.to_json_string())
    model = loom.AutoModelForCausalLM.from_pretrained(fixture_dir("llama-f32"), kernel_config=config)
    expected = run_cli("kernels", "--model", fixture_dir("llama-f32"), "--kernel-config", str(path), "--explain")
    assert model.explain_kernels() == expected
    assert "-> fused loom:RMSNormMLP" in expected
    plain = loom.AutoModelForCausalLM.from_pretrained(fixture_dir("llama-f32"))
    a = plain.generate([PROMPT], max_new_tokens=10, do_sample=False)
    b = model.generate([PROMPT], max_new_tokens=10, do_sample=False)
    assert a.tolist() == b.tolist()


def test_bad_kernel_config_names_the_key():
    with pytest.raises(ValueError, match="NoSuchLayer"):
        loom.KernelConfig({"NoSuchLayer": "loom:FusedRMSNorm"})


def run_onnx(model_path, rows):
    req = {"model": str(model_path), "op": "steps",
           "steps": [{"input_ids": rows, "attention_mask": [[1] * len(r) for r in rows],
                      "position_ids": [list(range(len(r))) for r in rows], "feed_past": False}]}
    req_path, out_path = str(model_path) + ".req.json", str(model_path) + ".out.json"
    with open(req_path, "w") as f:
        json.dump(req, f)
    assert os.path.isdir(os.path.join(NODE_MODULES, "onnxruntime-node")), "run scripts/install-test-oracles"
    r = subprocess.run(["node", os.path.join(SOURCE_DIR, "tests", "oracles", "run_onnx.js"), req_path, out_path],
                       env=dict(os.environ, NODE_PATH=NODE_MODULES), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    with open(out_path) as f:
        step = json.load(f)["steps"][0]
    return np.asarray(step["logits"], dtype=np.float32).reshape(step["dims"])


def onnx_op_types(path):
    import onnx
    return [n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node]


def test_python_node_fix_changes_the_onnx_file_and_onnx_runtime_runs_it(tmp_path):
    model = loom.AutoModelForCausalLM.from_pretrained(fixture_dir("llama-f32"))
    plain_path = tmp_path / "plain.onnx"
    exporters.OnnxExporter().export(model, plain_path)
    loom_logits = model([PROMPT]).logits
    np.testing.assert_allclose(run_onnx(plain_path, [PROMPT]), loom_logits, atol=1e-4)

    seen = []

    @exporters.register_fx_node_fix("onnx", op="rms_norm")
    def halve_final_norm(graph, node):
        seen.append(node.scope)
        if node.scope != "model.norm":
            return False
        (y,) = node.outputs
        (half,) = graph.add_node("scale", [y], {"factor": 0.5}, scope="model.norm")
        graph.replace_uses(y, half)
        return True

    try:
        fixed_path = tmp_path / "fixed.onnx"
        exporter = exporters.OnnxExporter(exporters.OnnxConfig())
        exporter.export(model, fixed_path)
    finally:
        exporters.unregister(halve_final_norm)
    assert "model.norm" in seen
    assert any("halve_final_norm" in line for line in exporter.report), exporter.report
    assert onnx_op_types(fixed_path).count("Mul") == onnx_op_types(plain_path).count("Mul") + 1
    # lm_head is linear without bias: halving its input halves every logit.
    np.testing.assert_allclose(run_onnx(fixed_path, [PROMPT]), 0.5 * loom_logits, atol=1e-4)

    again = tmp_path / "again.onnx"
    exporters.OnnxExporter().export(model, again)  # unregistered: the plain graph again
    assert onnx_op_types(again) == onnx_op_types(plain_path)


def test_python_program_fix_and_patch(tmp_path):
    model = loom.AutoModelForCausalLM.from_pretrained(fixture_dir("llama-f32"))
    calls = []

    @exporters.register_fx_program_fix("dynamo")
    def tag_program(program):
        calls.append(sorted(program.dims))
        program.set_metadata("python.fix", "tagged")

    @exporters.register_patch("dynamo", "ops.rms_norm")
    def count_norms(original):
        def replacement(builder, inputs, attrs):
            calls.append("rms_norm")
            return original(builder, inputs, attrs)
        return replacement

    try:
        exporter = exporters.DynamoExporter(exporters.DynamoConfig(dynamic=True))
        exporter.export(model, tmp_path / "program")
    finally:
        exporters.unregister(tag_program)
        exporters.unregister(count_norms)
    assert calls.count("rms_norm") >= 1 + 2 * model.config.num_hidden_layers
    assert any(isinstance(c, list) and "tokens" in c for c in calls)
    files = os.listdir(tmp_path / "program")
    text = "".join(open(tmp_path / "program" / f, errors="ignore").read() for f in files if f.endswith(".json"))
    assert "python.fix" in text and "tagged" in text


def test_a_raising_fix_aborts_the_export(tmp_path):
    model = loom.AutoModelForCausalLM.from_pretrained(fixture_dir("llama-f32"))

    @exporters.register_fx_node_fix("onnx", op="rms_norm")
    def broken(graph, node):
        raise RuntimeError("broken fix")

    try:
        with pytest.raises(RuntimeError, match="broken fix"):
            exporters.OnnxExporter().export(model, tmp_path / "x.onnx")
    finally:
        exporters.unregister(broken)


def test_executorch_exporter_writes_a_portable_program(tmp_path):
    model = loom.AutoModelForCausalLM.from_pretrained(fixture_dir("llama-f32"))
    path = tmp_path / "m.lpte"
    exporters.ExecutorchExporter(exporters.ExecutorchConfig(max_tokens=16)).export(model, path)
    assert path.stat().st_size > 0
    with pytest.raises(ValueError):
        exporters.register_fx_node_fix("tflite")


def same_files(a, b):
    names = sorted(os.listdir(a))
    assert names == sorted(os.listdir(b))
    for n in names:
        with open(os.path.join(a, n), "rb") as fa, open(os.path.join(b, n), "rb") as fb:
            assert fa.read() == fb.read(), n


@pytest.mark.parametrize("fmt", ["program", "onnx", "portable"])
def test_exporters_write_what_loom_export_writes(tmp_path, fmt):
    model = loom.AutoModelForCausalLM.from_pretrained(fixture_dir("llama-f32"))
    ours, theirs = tmp_path / "py", tmp_path / "cli"
    ours.mkdir()
    theirs.mkdir()
    if fmt == "program":
        exporters.DynamoExporter(exporters.DynamoConfig(dynamic=True)).export(model, ours / "p")
        run_cli("export", "--model", fixture_dir("llama-f32"), "--format", "program", "--dynamic", "--out",
                str(theirs / "p"))
        same_files(ours / "p", theirs / "p")
        return
    name = {"onnx": "m.onnx", "portable": "m.lpte"}[fmt]
    exporter = exporters.OnnxExporter() if fmt == "onnx" else exporters.ExecutorchExporter()
    exporter.export(model, ours / name)
    flags = ["--dynamic"] if fmt == "onnx" else []
    run_cli("export", "--model", fixture_dir("llama-f32"), "--format", fmt, *flags, "--out", str(theirs / name))
    same_files(ours, theirs)


def test_a_graph_view_kept_past_its_fix_raises(tmp_path):
    model = loom.AutoModelForCausalLM.from_pretrained(fixture_dir("llama-f32"))
    kept = []

    @exporters.register_fx_node_fix("onnx", op="rms_norm")
    def keep(graph, node):
        kept.append((graph, node))
        assert graph.num_nodes > 0 and node.op == "rms_norm"
        return False

    try:
        exporters.OnnxExporter().export(model, tmp_path / "m.onnx")
    finally:
        exporters.unregister(keep)
    graph, node = kept[0]
    with pytest.raises(loom.LoomError, match="after its fix"):
        graph.num_nodes
    with pytest.raises(loom.LoomError, match="after its fix"):
        node.op


def test_python_module_forward_patches_change_the_onnx_file(tmp_path):
    model = loom.AutoModelForCausalLM.from_pretrained(fixture_dir("llama-f32"))
    loom_logits = model([PROMPT]).logits
    seen = []

    @exporters.register_patch("onnx", "models.LlamaRMSNorm.forward")
    def halve_the_final_norm(original):
        def forward(module, builder, x):
            y = original(module, builder, x)
            seen.append((module.path, module.class_name))
            if module.path != "model.norm":
                return y
            return builder.record("scale", [y], {"factor": 0.5})
        return forward

    @exporters.register_patch("onnx", "models.LlamaAttention.forward")
    def watch_attention(original):
        def forward(module, builder, x, positions):
            seen.append((module.path, module.layer_name))
            return original(module, builder, x, positions)
        return forward

    try:
        exporter = exporters.OnnxExporter()
        exporter.export(model, tmp_path / "patched.onnx")
    finally:
        exporters.unregister(halve_the_final_norm)
        exporters.unregister(watch_attention)
    layers = model.config.num_hidden_layers
    assert ("model.norm", "LlamaRMSNorm") in seen
    assert [p for p, kind in seen if kind == "Attention"] == [f"model.layers.{i}.self_attn" for i in range(layers)]
    assert any("halve_the_final_norm" in line for line in exporter.report), exporter.report
    np.testing.assert_allclose(run_onnx(tmp_path / "patched.onnx", [PROMPT]), 0.5 * loom_logits, atol=1e-4)
    with pytest.raises(ValueError, match="models.<Class>.forward"):
        exporters.register_patch("onnx", "transformers.LlamaMLP.forward")(lambda original: original)
