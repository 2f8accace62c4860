"""AutoModelForCausalLM: logits against the PyTorch reference fixtures, generate against
`loom generate`, configs, errors as exceptions, the GIL released while computing."""
import gc
import json
import os
import resource
import threading

import numpy as np
import pytest

import loom
from conftest import DEFAULT_MODEL, fixture_dir, reference, run_cli


@pytest.mark.parametrize("variant", ["llama-f32", "qwen2-f32"])
def test_logits_match_pytorch_reference(variant):
    ref = reference(variant)
    model = loom.AutoModelForCausalLM.from_pretrained(fixture_dir(variant))
    logits = model(np.asarray([ref["prompt_ids"]])).logits
    assert logits.dtype == np.float32
    assert logits.shape == (1, *ref["logits_shape"])
    expected = np.asarray(ref["logits"], dtype=np.float32).reshape(ref["logits_shape"])
    assert np.max(np.abs(logits[0] - expected)) <= 1e-4


def test_greedy_generate_matches_pytorch_reference():
    ref = reference("llama-f32")
    model = loom.AutoModelForCausalLM.from_pretrained(fixture_dir("llama-f32"))
    n = ref["greedy_new_tokens"]
    out = model.generate(np.asarray([ref["prompt_ids"]]), max_new_tokens=n, do_sample=False, eos_token_id=[])
    assert out[0].tolist() == ref["prompt_ids"] + ref["greedy_ids"]


def test_batch_rows_and_padding_give_the_rows_own_logits(default_model):
    a, b = [4090, 1130, 258, 2081], [4090, 1130]
    alone_a = default_model([a]).logits[0]
    alone_b = default_model([b]).logits[0]
    padded = np.asarray([a, [0, 0] + b])
    mask = np.asarray([[1, 1, 1, 1], [0, 0, 1, 1]])
    both = default_model(padded, attention_mask=mask).logits
    np.testing.assert_allclose(both[0], alone_a, atol=1e-5)
    np.testing.assert_allclose(both[1, 2:], alone_b, atol=1e-5)


def cli_generate(*flags):
    return json.loads(run_cli("generate", "--model", DEFAULT_MODEL, "--json", *flags))


def test_generate_equals_cli_greedy(default_model, tokenizer):
    ids = tokenizer("And God said", return_tensors="np")["input_ids"]
    ours = default_model.generate(ids, max_new_tokens=24, do_sample=False)
    theirs = cli_generate("--prompt-ids", ",".join(map(str, ids[0])), "-n", "24", "--greedy")
    assert ours[0].tolist() == theirs["prompt_ids"] + theirs["generated_ids"]


def test_generate_equals_cli_sampling_with_seed(default_model, tokenizer):
    ids = tokenizer("The LORD is my shepherd", return_tensors="np")["input_ids"]
    ours = default_model.generate(ids, max_new_tokens=20, do_sample=True, temperature=0.7, top_k=40, seed=11)
    theirs = cli_generate("--prompt-ids", ",".join(map(str, ids[0])), "-n", "20", "--temperature", "0.7",
                          "--top-k", "40", "--seed", "11")
    assert ours[0].tolist() == theirs["prompt_ids"] + theirs["generated_ids"]
    other = default_model.generate(ids, max_new_tokens=20, do_sample=True, temperature=0.7, top_k=40, seed=12)
    assert other[0].tolist() != ours[0].tolist()


def test_stop_strings_need_and_use_the_tokenizer(default_model, tokenizer):
    ids = tokenizer("In the beginning", return_tensors="np")["input_ids"]
    with pytest.raises(ValueError, match="tokenizer"):
        default_model.generate(ids, max_new_tokens=30, do_sample=False, stop_strings=["Lord"])
    full = tokenizer.decode(default_model.generate(ids, max_new_tokens=30, do_sample=False)[0][ids.shape[1]:],
                            skip_special_tokens=True)
    assert "Lord" in full
    out = default_model.generate(ids, max_new_tokens=30, do_sample=False, stop_strings=["Lord"], tokenizer=tokenizer)
    text = tokenizer.decode(out[0][ids.shape[1]:], skip_special_tokens=True)
    assert "Lord" in text and len(out[0]) < ids.shape[1] + 30


def test_generation_config_fields_and_errors(tmp_path):
    gc = loom.GenerationConfig.from_pretrained(DEFAULT_MODEL)
    assert gc.max_new_tokens == 64 and gc.eos_token_id == [4091, 4095] and gc.do_sample is True
    assert loom.GenerationConfig(top_k=3).to_dict()["top_k"] == 3
    for field, value in [("temperature", -1.0), ("top_p", 0.0), ("max_new_tokens", 0), ("repetition_penalty", 0)]:
        with pytest.raises(ValueError, match=field):
            loom.GenerationConfig(**{field: value})


def test_unknown_generate_argument_is_an_error(default_model):
    with pytest.raises(ValueError, match="max_new_tokenz"):
        default_model.generate([[4090, 1130]], max_new_tokenz=3)


def test_errors_become_python_exceptions(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        loom.AutoModelForCausalLM.from_pretrained(str(tmp_path / "missing"))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text('{"model_type": "no_such_arch", "vocab_size": 8}')
    with pytest.raises(loom.LoomError):
        loom.AutoModelForCausalLM.from_pretrained(str(bad))
    (bad / "config.json").write_text("{not json")
    with pytest.raises(ValueError):
        loom.AutoModelForCausalLM.from_pretrained(str(bad))


def test_token_out_of_vocabulary_is_value_error(default_model):
    with pytest.raises(ValueError, match="vocab|range"):
        default_model([[4090, 999999]])
    with pytest.raises(ValueError, match="vocab|range"):
        default_model.generate([[999999]], max_new_tokens=2)
    assert isinstance(loom.InvalidArgumentError("x"), loom.LoomError)


def test_save_pretrained_round_trips(default_model, tmp_path):
    default_model.save_pretrained(tmp_path / "copy")
    again = loom.AutoModelForCausalLM.from_pretrained(str(tmp_path / "copy"))
    ids = [[4090, 1130, 258]]
    np.testing.assert_array_equal(again(ids).logits, default_model(ids).logits)


def test_a_python_thread_runs_while_generate_computes(default_model):
    ticks = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(1)

    t = threading.Thread(target=count)
    t.start()
    before = len(ticks)
    default_model.generate([[4090, 1130]], max_new_tokens=48, do_sample=False, eos_token_id=[])
    during = len(ticks) - before
    stop.set()
    t.join()
    assert during > 1000  # the counter thread held the GIL for most of generate's wall time


def test_thousand_generate_calls_do_not_grow_memory(default_model):
    def rss_kib():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

    for _ in range(50):
        default_model.generate([[4090, 1130]], max_new_tokens=2, do_sample=False)
    start = rss_kib()
    for _ in range(1000):
        default_model.generate([[4090, 1130]], max_new_tokens=2, do_sample=False)
    assert rss_kib() - start < 20 * 1024  # KiB


def test_from_pretrained_options(default_model):
    one = loom.AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL, num_threads=1, dtype="auto")
    assert one.num_threads == 1
    ids = [[4090, 1130, 258]]
    np.testing.assert_allclose(one(ids).logits, default_model(ids).logits, atol=1e-5)
    manager = one.init_continuous_batching(max_new_tokens=4, do_sample=False)
    del one  # the manager keeps what it needs of the model (its thread pool too)
    gc.collect()
    manager.start()
    rid = manager.add_request(ids[0])
    assert manager.get_result(request_id=rid, timeout=30).is_finished()
    manager.destroy()
    with pytest.raises(ValueError, match="matmul_precision"):
        loom.AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL, matmul_precision="fastest")
    stored = default_model.config.to_dict().get("torch_dtype", default_model.config.to_dict().get("dtype"))
    other = "bfloat16" if stored != "bfloat16" else "float32"
    with pytest.raises(ValueError, match="dtype"):
        loom.AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL, dtype=other)
    with pytest.raises(ValueError, match="num_threads"):
        loom.AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL, num_threads=-2)


@pytest.mark.parametrize("kwargs,flags", [
    (dict(min_p=0.1, temperature=1.0, top_k=0), ["--min-p", "0.1", "--temperature", "1.0", "--top-k", "0"]),
    (dict(repetition_penalty=1.3, top_p=0.9), ["--repetition-penalty", "1.3", "--top-p", "0.9"]),
])
def test_generate_processors_equal_cli(default_model, tokenizer, kwargs, flags):
    ids = tokenizer("And the earth was without form", return_tensors="np")["input_ids"]
    ours = default_model.generate(ids, max_new_tokens=24, do_sample=True, seed=3, **kwargs)
    theirs = cli_generate("--prompt-ids", ",".join(map(str, ids[0])), "-n", "24", "--seed", "3", *flags)
    assert ours[0].tolist() == theirs["prompt_ids"] + theirs["generated_ids"]


def test_gguf_file_loads_like_its_checkpoint(tmp_path):
    """from_pretrained on a .gguf file (written by `loom convert --to gguf`): same logits,
    config from the file's metadata, tokenizer from tokenizer.ggml.*."""
    path = str(tmp_path / "kjv.gguf")
    run_cli("convert", "--to", "gguf", "--out", path)
    folder = loom.AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL)
    gguf = loom.AutoModelForCausalLM.from_pretrained(path)
    assert gguf.config.hidden_size == folder.config.hidden_size
    assert gguf.config.num_hidden_layers == folder.config.num_hidden_layers
    ids = np.asarray([[4090, 1130, 258, 2081]])
    assert np.array_equal(gguf(ids).logits, folder(ids).logits)
    tok_file, tok_folder = loom.AutoTokenizer.from_pretrained(path), loom.AutoTokenizer.from_pretrained(DEFAULT_MODEL)
    text = "In the beginning God created the heaven"
    assert tok_file(text)["input_ids"] == tok_folder(text)["input_ids"]
    with pytest.raises(ValueError, match="q3_k"):
        loom.AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL, quantize="q3_k")
