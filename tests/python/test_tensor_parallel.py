"""from_pretrained(..., tensor_parallel=2) under `mpirun -np 2 python3 script.py`: every
rank runs the same script; rank 0's model gives the tokens and logits one process
gives, the other rank follows its steps and ends with it. Needs Debian's OpenMPI."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import DEFAULT_MODEL

SCRIPT = textwrap.dedent("""
    import json, os, sys
    import loom
    model = loom.AutoModelForCausalLM.from_pretrained(sys.argv[1], tensor_parallel=2)
    # Only rank 0 gets here: the other rank followed its steps inside from_pretrained.
    ids = [[1, 320, 332, 44]]
    out = {
        "rank": int(os.environ["OMPI_COMM_WORLD_RANK"]),
        "greedy": model.generate(ids, max_new_tokens=24, do_sample=False)[0].tolist(),
        "sampled": model.generate(ids, max_new_tokens=16, do_sample=True, temperature=0.8, top_k=40, seed=5)[0].tolist(),
        "logits": model(ids).logits[0].tolist(),
    }
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)
""")


def mpirun():
    path = shutil.which("mpirun")
    if path is None:
        pytest.fail("mpirun not found: scripts/install-deps installs Debian's openmpi-bin")
    return [path, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-x", "LOOM_NUM_THREADS=1",
            "-x", "PYTHONPATH", "-np", "2"]


def test_two_ranks_generate_what_one_process_generates(default_model, tmp_path):
    script = tmp_path / "tp.py"
    script.write_text(SCRIPT)
    out = tmp_path / "out.json"
    env = dict(os.environ, LOOM_NUM_THREADS="1")
    r = subprocess.run(mpirun() + [sys.executable, str(script), DEFAULT_MODEL, str(out)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr  # both ranks ended cleanly
    got = json.loads(out.read_text())
    assert got["rank"] == 0
    ids = [[1, 320, 332, 44]]
    assert got["greedy"] == default_model.generate(ids, max_new_tokens=24, do_sample=False)[0].tolist()
    assert got["sampled"] == default_model.generate(ids, max_new_tokens=16, do_sample=True, temperature=0.8,
                                                    top_k=40, seed=5)[0].tolist()
    want = default_model(ids).logits[0]
    np.testing.assert_allclose(np.asarray(got["logits"]), want, atol=1e-5 * float(np.abs(want).max()))


def test_tensor_parallel_without_mpirun_is_a_named_error():
    import loom
    env_has_mpi = any(k in os.environ for k in ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"))
    assert not env_has_mpi
    with pytest.raises(ValueError, match="needs 2 processes started by mpirun"):
        loom.AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL, tensor_parallel=2)
