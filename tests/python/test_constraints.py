"""Per-call output constraints from Python: generate, generate_batch and add_request
under response_format / json_schema / regex / choice / grammar / structured_outputs.
JSON outputs are validated with Debian's python3-jsonschema."""
import json
import re

import jsonschema
import pytest

import loom

SCHEMA = {"type": "object",
          "properties": {"book": {"enum": ["Genesis", "Exodus"]}, "chapter": {"type": "integer", "minimum": 1, "maximum": 50},
                         "words": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 2}},
          "required": ["book", "chapter"], "additionalProperties": False}


def generated_text(model, tokenizer, prompt, **kw):
    ids = tokenizer(prompt, return_tensors="np")["input_ids"]
    out = model.generate(ids, max_new_tokens=kw.pop("max_new_tokens", 80), **kw)
    return tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


@pytest.mark.parametrize("sampling", [{"do_sample": False}, {"do_sample": True, "temperature": 1.0, "seed": 3}])
def test_generate_json_schema_validates(default_model, tokenizer, sampling):
    for kw in ({"json_schema": SCHEMA}, {"json_schema": json.dumps(SCHEMA)},
               {"response_format": {"type": "json_schema", "json_schema": {"name": "v", "schema": SCHEMA}}},
               {"structured_outputs": {"json": SCHEMA}}):
        text = generated_text(default_model, tokenizer, "In the beginning", **kw, **sampling)
        jsonschema.validate(json.loads(text), SCHEMA)


def test_generate_regex_choice_grammar_json_object(default_model, tokenizer):
    text = generated_text(default_model, tokenizer, "And God said", regex=r"[0-9]{1,3}:[0-9]{1,3}")
    assert re.fullmatch(r"[0-9]{1,3}:[0-9]{1,3}", text), text
    for seed in (1, 2, 3):
        text = generated_text(default_model, tokenizer, "And God divided", choice=["light", "darkness"],
                              do_sample=True, seed=seed)
        assert text in ("light", "darkness")
    text = generated_text(default_model, tokenizer, "Is it good?", grammar='root ::= ("yes" | "no") "."')
    assert text in ("yes.", "no.")
    text = generated_text(default_model, tokenizer, "x", response_format={"type": "json_object"})
    assert isinstance(json.loads(text), dict)
    text = generated_text(default_model, tokenizer, "x", structured_outputs={"regex": "[a-z]{3}"})
    assert re.fullmatch("[a-z]{3}", text)


def test_generate_batch_and_add_request(default_model, tokenizer):
    inputs = [tokenizer.encode(p) for p in ("In the beginning", "And the earth was", "Blessed are")]
    config = loom.GenerationConfig(max_new_tokens=80, do_sample=False, eos_token_id=tokenizer.eos_token_id)
    outputs = default_model.generate_batch(inputs, generation_config=config, json_schema=SCHEMA, progress_bar=False)
    assert len(outputs) == 3
    for out in outputs.values():
        jsonschema.validate(json.loads(out.text), SCHEMA)
    with default_model.continuous_batching_context_manager(generation_config=config) as manager:
        a = manager.add_request(inputs[0], choice=["yea", "nay"])
        b = manager.add_request(inputs[1], regex="[A-Z][a-z]+")
        c = manager.add_request(inputs[2])  # unconstrained, in the same batch
        ra, rb, rc = (manager.get_result(request_id=r, timeout=60) for r in (a, b, c))
    assert ra.text in ("yea", "nay")
    assert re.fullmatch("[A-Z][a-z]+", rb.text), rb.text
    assert rc.finish_reason in ("length", "stop")


def test_bad_constraints_raise_naming_the_problem(default_model, tokenizer):
    ids = tokenizer("x", return_tensors="np")["input_ids"]
    with pytest.raises(ValueError, match="uniqueItems"):
        default_model.generate(ids, json_schema={"type": "array", "uniqueItems": True})
    with pytest.raises(ValueError, match="both constrain"):
        default_model.generate(ids, regex="a", choice=["b"])
    with pytest.raises(ValueError, match="never defined"):
        default_model.generate(ids, grammar="root ::= nothing")
    with pytest.raises(ValueError, match="json_schema"):
        default_model.generate(ids, json_schema="{not json")
    with pytest.raises(ValueError, match="structural_tag"):
        default_model.generate(ids, structured_outputs={"structural_tag": {}})
    with pytest.raises(loom.InvalidArgumentError):
        default_model.generate(ids, response_format={"type": "xml"})
