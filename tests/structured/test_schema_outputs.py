"""The schema corpus through `loom batch` with the bundled model, greedy and sampled:
every output that finished validates against its schema with the jsonschema library
(Debian's python3-jsonschema, formats checked); outputs cut by max_new_tokens must be
marked "length". Regex and choice lines match. Run by ctest (structured_schema_outputs)."""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import jsonschema

SRC = os.environ.get("LOOM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
LOOM = os.environ["LOOM_BIN"]
MODEL = os.path.join(SRC, "models", "loom-kjv-tiny")
SCHEMAS = os.path.join(SRC, "tests", "structured", "schemas")
PROMPTS = ["In the beginning God created", "And the LORD said unto Moses,", "Blessed is the man that",
           "The LORD is my shepherd;"]
REGEXES = [r"[A-Z][a-z]+ (of|and) [a-z]+\.", r"\d{1,3}:\d{1,3}", r"(yea|nay)(, (yea|nay)){0,2}"]
CHOICES = [["Genesis", "Exodus", "Leviticus"], ["light", "darkness"]]


def run_batch(lines):
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "out.jsonl")
        with open(inp, "w") as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")
        proc = subprocess.run([LOOM, "batch", "--model", MODEL, "--input", inp, "--output", out, "--no-progress",
                               "--per-request-processors", "true"], capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise AssertionError("loom batch failed: " + proc.stderr[-2000:])
        with open(out) as f:
            return {r["id"]: r for r in map(json.loads, f)}


class SchemaOutputs(unittest.TestCase):
    def test_corpus_outputs_validate(self):
        names = sorted(n[:-5] for n in os.listdir(SCHEMAS) if n.endswith(".json"))
        self.assertGreaterEqual(len(names), 50)
        schemas, lines = {}, []
        for i, name in enumerate(names):
            with open(os.path.join(SCHEMAS, name + ".json")) as f:
                schemas[name] = json.load(f)
            rf = {"type": "json_schema", "json_schema": {"name": name, "schema": schemas[name], "strict": True}}
            prompt = PROMPTS[i % len(PROMPTS)]
            lines.append({"id": name + ":greedy", "prompt": prompt, "response_format": rf, "max_new_tokens": 192})
            lines.append({"id": name + ":sampled", "prompt": prompt, "response_format": rf, "max_new_tokens": 192,
                          "temperature": 0.9, "top_p": 0.95, "seed": 1000 + i})
        for i, rx in enumerate(REGEXES):
            lines.append({"id": "regex%d" % i, "prompt": PROMPTS[i], "regex": rx, "max_new_tokens": 48})
        for i, ch in enumerate(CHOICES):
            lines.append({"id": "choice%d" % i, "prompt": PROMPTS[i], "choice": ch, "max_new_tokens": 16,
                          "temperature": 1.0, "seed": i})
        results = run_batch(lines)
        self.assertEqual(len(results), len(lines))
        finished = truncated = 0
        problems = []
        for line in lines:
            r = results[line["id"]]
            self.assertEqual(r["status"], "FINISHED", "%s: %s" % (line["id"], r.get("error")))
            text = r["text"]
            if r["finish_reason"] == "length":
                truncated += 1
                self.assertEqual(len(r["generated_ids"]), line["max_new_tokens"], line["id"])
                continue
            self.assertEqual(r["finish_reason"], "stop", line["id"])
            finished += 1
            if "regex" in line:
                if not re.fullmatch(line["regex"], text):
                    problems.append("%s: %r does not match /%s/" % (line["id"], text, line["regex"]))
                continue
            if "choice" in line:
                if text not in line["choice"]:
                    problems.append("%s: %r is not one of %s" % (line["id"], text, line["choice"]))
                continue
            schema = schemas[line["id"].split(":")[0]]
            try:
                value = json.loads(text)
                jsonschema.validate(value, schema, cls=jsonschema.Draft202012Validator,
                                    format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
            except (ValueError, jsonschema.ValidationError) as e:
                problems.append("%s: %r: %s" % (line["id"], text, str(e).splitlines()[0]))
        print("structured outputs: %d finished and checked, %d cut at max_new_tokens" % (finished, truncated),
              file=sys.stderr)
        self.assertEqual(problems, [])
        # Most requests must actually finish, or the check above would be vacuous.
        self.assertGreaterEqual(finished, 0.75 * len(lines))


if __name__ == "__main__":
    unittest.main()
