"""Shared fixtures of the Python tests: where the sources, the build, the parity fixtures
and the `loom` command are, and models loaded once per session."""
import json
import os
import subprocess

import pytest

SOURCE_DIR = os.environ.get("LOOM_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BINARY_DIR = os.environ.get("LOOM_BINARY_DIR", os.path.join(SOURCE_DIR, "build"))
DEFAULT_MODEL = os.path.join(SOURCE_DIR, "models", "loom-kjv-tiny")
FIXTURES = os.path.join(BINARY_DIR, "fixtures")
LOOM_CLI = os.path.join(BINARY_DIR, "loom")


def run_cli(*args, stdin=None):
    """The `loom` command's stdout (it must succeed)."""
    r = subprocess.run([LOOM_CLI, *args], input=stdin, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"loom {' '.join(args)} failed: {r.stderr}"
    return r.stdout


def fixture_dir(name):
    d = os.path.join(FIXTURES, name)
    assert os.path.isfile(os.path.join(d, "reference.json")), f"missing parity fixture {d} (run the fixtures ctest)"
    return d


def reference(name):
    with open(os.path.join(fixture_dir(name), "reference.json")) as f:
        return json.load(f)


@pytest.fixture(scope="session")
def default_model():
    import loom
    return loom.AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL)


@pytest.fixture(scope="session")
def tokenizer():
    import loom
    return loom.AutoTokenizer.from_pretrained(DEFAULT_MODEL)
