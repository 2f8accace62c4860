"""AutoTokenizer against the `tokenizers` library's outputs (the oracle files written by
scripts/install-test-oracles from the npm binding), and its Transformers-style API."""
import json
import os

import numpy as np
import pytest

import loom
from conftest import DEFAULT_MODEL, SOURCE_DIR

ORACLES = os.path.join(SOURCE_DIR, ".cache", "tokenizer-oracles")


def load_oracle(name):
    path = os.path.join(ORACLES, name + ".json")
    assert os.path.isfile(path), f"missing {path}: run scripts/install-test-oracles"
    with open(path) as f:
        oracle = json.load(f)
    with open(os.path.join(ORACLES, "corpus.json")) as f:
        texts = {c["name"]: c["text"] for c in json.load(f)}
    return oracle, texts


@pytest.mark.parametrize("name", ["llama3", "qwen3", "gemma3"])
def test_encode_and_decode_equal_the_tokenizers_library(name):
    oracle, texts = load_oracle(name)
    tok = loom.AutoTokenizer.from_pretrained(oracle["tokenizer"])
    cases = [c for c in oracle["cases"] if c["name"] in texts][:120]
    assert cases
    batch = tok([texts[c["name"]] for c in cases], return_offsets_mapping=True)
    for i, case in enumerate(cases):
        text = texts[case["name"]]
        assert batch["input_ids"][i] == case["with"]["ids"], case["name"]
        flat = [x for pair in batch["offset_mapping"][i] for x in pair]  # the oracle stores them flat
        assert flat == case["with"]["offsets"], case["name"]
        assert tok.encode(text, add_special_tokens=False) == case["without"]["ids"], case["name"]
        assert tok.convert_ids_to_tokens(case["with"]["ids"]) == case["with"]["tokens"], case["name"]
        assert tok.decode(case["with"]["ids"]) == case["decode"], case["name"]
        assert tok.decode(case["with"]["ids"], skip_special_tokens=True) == case["decode_skip"], case["name"]
    for d in oracle["random_decodes"][:50]:
        assert tok.decode(d["ids"]) == d["decode"]
    assert tok.vocab_size == oracle["vocab_size"] == len(tok)


def test_call_returns_numpy_and_masks(tokenizer):
    enc = tokenizer(["In the beginning", "And"], padding=True, return_tensors="np")
    assert enc["input_ids"].dtype == np.int64 and enc["input_ids"].shape == enc.attention_mask.shape
    assert enc["attention_mask"][1].tolist().count(0) == enc["input_ids"].shape[1] - len(tokenizer.encode("And"))
    with pytest.raises(ValueError, match="padding"):
        tokenizer(["In the beginning", "And"], return_tensors="np")
    single = tokenizer("In the beginning")
    assert single["input_ids"] == tokenizer.encode("In the beginning")
    assert single["input_ids"][0] == tokenizer.bos_token_id


def test_special_tokens_and_batch_decode(tokenizer):
    assert tokenizer.bos_token == "<|begin_of_text|>" and tokenizer.bos_token_id == 4090
    assert tokenizer.eos_token_id is not None and tokenizer.eos_token is not None
    ids = tokenizer(["In the beginning", "God"])["input_ids"]
    assert tokenizer.batch_decode(ids, skip_special_tokens=True) == ["In the beginning", "God"]
    assert tokenizer.convert_ids_to_tokens(4090) == "<|begin_of_text|>"


def test_apply_chat_template(tokenizer):
    messages = [{"role": "user", "content": "Who made the heaven?"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert "Who made the heaven?" in text
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    assert ids == tokenizer.encode(text, add_special_tokens=False)
    d = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True, return_tensors="np")
    assert d["input_ids"].shape == d["attention_mask"].shape == (1, len(ids))


def test_missing_tokenizer_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        loom.AutoTokenizer.from_pretrained(str(tmp_path / "nothing"))
    (tmp_path / "tokenizer.json").write_text("{broken")
    with pytest.raises(ValueError):
        loom.AutoTokenizer.from_pretrained(str(tmp_path / "tokenizer.json"))
