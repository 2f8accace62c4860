"""Per-call output constraints for generate, generate_batch and add_request, in the
names users know: OpenAI's ``response_format`` dict, ``json_schema`` (a schema dict, its
JSON text, or a class with ``model_json_schema()``), vLLM's ``regex``, ``choice``,
``grammar`` (GBNF) and its ``structured_outputs`` dict (``json``, ``regex``, ``choice``,
``grammar``, ``json_object``). One per call; compiled once per model and shared."""
import json

from . import _loom

CONSTRAINT_ARGS = ("response_format", "json_schema", "regex", "choice", "grammar", "structured_outputs")


def _schema(value, name):
    if hasattr(value, "model_json_schema"):
        value = value.model_json_schema()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as e:
            raise ValueError(f"{name}: not valid JSON ({e})") from None
    if not isinstance(value, (dict, bool)):
        raise ValueError(f"{name} must be a JSON Schema (a dict), got {type(value).__name__}")
    return value


def _json_schema_format(schema, strict=True):
    return {"type": "json_schema", "json_schema": {"name": "schema", "schema": schema, "strict": strict}}


def constraint_fields(response_format=None, json_schema=None, regex=None, choice=None, grammar=None,
                      structured_outputs=None):
    """The `loom batch` line fields the arguments mean, or None when unconstrained."""
    given = []  # (argument name, fields)
    if response_format is not None:
        if not isinstance(response_format, dict):
            raise ValueError("response_format must be a dict like {'type': 'json_object'}")
        if response_format.get("type") != "text":
            given.append(("response_format", {"response_format": response_format}))
    if json_schema is not None:
        given.append(("json_schema", {"response_format": _json_schema_format(_schema(json_schema, "json_schema"))}))
    if regex is not None:
        given.append(("regex", {"regex": regex}))
    if choice is not None:
        given.append(("choice", {"choice": list(choice) if not isinstance(choice, str) else choice}))
    if grammar is not None:
        given.append(("grammar", {"grammar": grammar}))
    if structured_outputs is not None:
        if not isinstance(structured_outputs, dict):
            raise ValueError("structured_outputs must be a dict (json, regex, choice, grammar or json_object)")
        for key, value in structured_outputs.items():
            name = f"structured_outputs['{key}']"
            if value is None:
                continue
            if key == "json":
                given.append((name, {"response_format": _json_schema_format(_schema(value, name))}))
            elif key == "json_object":
                if value:
                    given.append((name, {"response_format": {"type": "json_object"}}))
            elif key in ("regex", "grammar"):
                given.append((name, {key: value}))
            elif key == "choice":
                given.append((name, {"choice": list(value) if not isinstance(value, str) else value}))
            else:
                raise ValueError(f"{name} is not supported (json, regex, choice, grammar, json_object are)")
    if len(given) > 1:
        raise ValueError(f"{given[0][0]} and {given[1][0]} both constrain the output: give one")
    return given[0][1] if given else None


def pop_constraint(handle, kwargs):
    """Takes the constraint arguments out of kwargs; the compiled constraint or None."""
    args = {k: kwargs.pop(k) for k in CONSTRAINT_ARGS if k in kwargs}
    fields = constraint_fields(**args)
    if fields is None:
        return None
    return _loom._compile_constraint(handle, json.dumps(fields))
