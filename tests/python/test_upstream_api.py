"""Upstream arguments a user of the kernels and continuous-batching guides writes
(generate_batch's progress_bar default, from_pretrained's use_kernels and device_map), and
a program written by DynamoExporter run like the checkpoint it came from
(loom.load_program, `loom generate --model PROG`)."""
import inspect
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

import loom
from loom import exporters
from conftest import DEFAULT_MODEL, LOOM_CLI, run_cli

PROMPT = "In the beginning God created"


def test_generate_batch_progress_bar_is_off_by_default(default_model, capfd):
    assert inspect.signature(default_model.generate_batch).parameters["progress_bar"].default is False
    default_model.generate_batch([[1, 2, 3]], max_new_tokens=2, do_sample=False)
    assert "[generate_batch]" not in capfd.readouterr().err
    default_model.generate_batch([[1, 2, 3]], max_new_tokens=2, do_sample=False, progress_bar=True)
    assert "[generate_batch]" in capfd.readouterr().err


def test_use_kernels_and_device_map_as_the_kernels_guide_writes_them(default_model, tokenizer):
    ids = [tokenizer.encode(PROMPT)]
    want = default_model.generate(ids, max_new_tokens=12, do_sample=False)
    for device_map in ("auto", "cpu", {"": "cpu"}):
        model = loom.AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL, use_kernels=True, device_map=device_map)
        explained = model.explain_kernels()
        # The built-in kernels replaced the modules; the MLP's (merged gate/up + SiLU)
        # covers its act_fn, so SiLUAndMul has nothing left to replace there.
        for kernel in ("loom:FusedRMSNorm", "loom:FusedQKV", "loom:FusedGateUpMLP"):
            assert kernel in explained, explained
        np.testing.assert_array_equal(model.generate(ids, max_new_tokens=12, do_sample=False), want)
    # With a kernel_config, use_kernels=True applies exactly that one.
    config = loom.KernelConfig({"RMSNorm": "loom:FusedRMSNorm"})
    model = loom.AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL, use_kernels=True, kernel_config=config,
                                                      device_map="auto")
    assert "loom:FusedQKV" not in model.explain_kernels() and "loom:FusedRMSNorm" in model.explain_kernels()
    plain = loom.AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL, use_kernels=False, device_map="cpu")
    with pytest.raises(loom.FailedPreconditionError):
        plain.explain_kernels()  # no kernels asked for


def test_use_kernels_and_device_map_errors():
    with pytest.raises(ValueError, match="device_map='cuda'.*CPU"):
        loom.AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL, device_map="cuda")
    with pytest.raises(ValueError, match="device_map"):
        loom.AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL, device_map={"model.layers.0": 0})
    with pytest.raises(ValueError, match="use_kernels=False"):
        loom.AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL, use_kernels=False,
                                                  kernel_config=loom.KernelConfig({"RMSNorm": "loom:FusedRMSNorm"}))
    with pytest.raises(TypeError, match="use_kernels"):
        loom.AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL, use_kernels="yes")


@pytest.fixture(scope="module")
def program(tmp_path_factory, default_model):
    path = tmp_path_factory.mktemp("program") / "kjv"
    exporters.DynamoExporter(exporters.DynamoConfig(dynamic=True)).export(default_model, path)
    return path


def test_a_program_folder_carries_what_running_it_needs(program):
    names = set(os.listdir(program))
    assert {"program.json", "weights.safetensors", "config.json", "generation_config.json", "tokenizer.json"} <= names
    with open(program / "config.json") as f, open(os.path.join(DEFAULT_MODEL, "config.json")) as g:
        assert json.load(f) == json.load(g)


def test_load_program_gives_the_models_tokens(default_model, tokenizer, program):
    loaded = loom.load_program(program)
    ids = [tokenizer.encode(PROMPT)]
    np.testing.assert_array_equal(loaded.generate(ids, max_new_tokens=24, do_sample=False),
                                  default_model.generate(ids, max_new_tokens=24, do_sample=False))
    np.testing.assert_allclose(loaded(ids).logits, default_model(ids).logits, rtol=0, atol=0)
    prompts = [tokenizer.encode(p) for p in ("And God said", "Jesus wept", "The LORD is my shepherd")]
    ours = loaded.generate_batch(prompts, max_new_tokens=10, do_sample=False)
    theirs = default_model.generate_batch(prompts, max_new_tokens=10, do_sample=False)
    assert [o.generated_tokens for o in ours.values()] == [o.generated_tokens for o in theirs.values()]
    assert [o.text for o in ours.values()] == [o.text for o in theirs.values()]  # its own tokenizer
    # The tokenizer travels with the program.
    assert loom.AutoTokenizer.from_pretrained(program).encode(PROMPT) == tokenizer.encode(PROMPT)
    with pytest.raises(loom.FailedPreconditionError, match="exported program"):
        loaded.save_pretrained(program.parent / "nope")
    with pytest.raises(loom.InvalidArgumentError, match="exported program"):
        loom.AutoModelForCausalLM.from_pretrained(program, quantize="q8_0")


def test_loom_generate_runs_a_program_like_its_checkpoint(program):
    flags = ["--prompt", PROMPT, "-n", "20", "--greedy", "--json"]
    ours = json.loads(run_cli("generate", "--model", str(program), *flags))
    theirs = json.loads(run_cli("generate", "--model", DEFAULT_MODEL, *flags))
    assert ours["generated_ids"] == theirs["generated_ids"] and ours["text"] == theirs["text"]
    r = subprocess.run([LOOM_CLI, "generate", "--model", str(program), "--quantize", "q8_0", *flags],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "--quantize" in r.stderr and "exported program" in r.stderr



def test_every_command_runs_a_program_like_its_checkpoint(program, tmp_path):
    """loom batch (and chat, serve, bench, perplexity: one loader) take a program too."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": str(i), "prompt": p, "max_new_tokens": 12, "temperature": 0}) + "\n"
                               for i, p in enumerate(("And God said", "Jesus wept", "The LORD is my shepherd"))))
    results = {}
    for name, model in (("program", str(program)), ("checkpoint", DEFAULT_MODEL)):
        out = tmp_path / (name + ".jsonl")
        run_cli("batch", "--model", model, "--input", str(prompts), "--output", str(out), "--no-progress")
        results[name] = [(r["id"], r["generated_ids"], r["text"]) for r in map(json.loads, out.read_text().splitlines())]
    assert results["program"] == results["checkpoint"] and len(results["program"]) == 3

def damaged_copies(program, root):
    """(what was damaged, folder) pairs."""
    def copy(name):
        d = root / name
        shutil.copytree(program, d)
        return d

    d = copy("truncated-weights")
    w = d / "weights.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    yield "weights.safetensors", d
    d = copy("bad-json")
    (d / "program.json").write_text((d / "program.json").read_text()[:1000])
    yield "program.json", d
    d = copy("no-config")
    os.remove(d / "config.json")
    yield "config.json", d
    d = copy("other-config")
    config = json.loads((d / "config.json").read_text())
    config["vocab_size"] += 7
    (d / "config.json").write_text(json.dumps(config))
    yield "vocab_size", d
    d = copy("static")
    p = json.loads((d / "program.json").read_text())
    p["metadata"]["dynamic"] = "false"
    (d / "program.json").write_text(json.dumps(p))
    yield "static sizes", d


def test_a_damaged_program_fails_with_an_error_naming_the_problem(program, tmp_path):
    for what, d in damaged_copies(program, tmp_path):
        with pytest.raises(loom.LoomError) as e:
            loom.load_program(d)
        assert what in str(e.value), (what, str(e.value))
        r = subprocess.run([LOOM_CLI, "generate", "--model", str(d), "--prompt-ids", "1,2", "-n", "2"],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode != 0 and what in r.stderr, (what, r.stderr)
    with pytest.raises(loom.NotFoundError, match="program.json"):
        loom.load_program(DEFAULT_MODEL)  # a checkpoint, not a program
