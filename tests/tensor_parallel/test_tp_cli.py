"""`loom` under mpirun with --tensor-parallel: the commands equal one process, the
flags' mistakes are named, and a rank that dies or stops ends the whole job in
bounded time with an error naming it. Needs LOOM_BIN and Debian's OpenMPI."""
import json
import os
import signal
import subprocess
import tempfile
import time
import unittest

LOOM = os.environ.get("LOOM_BIN", "build/loom")
SOURCE = os.environ.get("LOOM_SOURCE_DIR", ".")
MODEL = os.path.join(SOURCE, "models", "loom-kjv-tiny")
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-x", "LOOM_NUM_THREADS=1"]
ENV = dict(os.environ, LOOM_NUM_THREADS="1")


def mpirun(n, *args):
    return MPIRUN + ["-np", str(n), LOOM, *args]


def write_requests(path, count, max_new, prompt="In the beginning God created"):
    with open(path, "w") as f:
        for i in range(count):
            d = {"id": f"r{i}", "prompt": prompt + " and" * (i % 7), "max_new_tokens": max_new + 3 * (i % 5)}
            if i % 2:
                d.update(do_sample=True, temperature=0.9, seed=100 + i)
            f.write(json.dumps(d) + "\n")


def parent_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def rank_pids(parent_pid):
    """pid of each rank the mpirun `parent_pid` started (its children), by the rank OpenMPI
    put in their environment. Only that job's: another mpirun job of loom running at the
    same time (ctest -j) has ranks 0 and 1 too."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if parent_of(pid) != parent_pid:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"OMPI_COMM_WORLD_RANK" in env and LOOM.encode() in cmd and b"mpirun" not in cmd.split(b"\0")[0]:
            out[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(pid)
    return out


def running(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


class TensorParallelCli(unittest.TestCase):
    def test_batch_with_two_ranks_equals_one_process(self):
        with tempfile.TemporaryDirectory() as d:
            req, one, two = (os.path.join(d, n) for n in ("in.jsonl", "one.jsonl", "two.jsonl"))
            write_requests(req, 12, 10)
            base = ["batch", "-m", MODEL, "--input", req, "--no-progress", "--page-size", "16", "--max-batch-tokens", "40"]
            subprocess.run([LOOM, *base, "--output", one], check=True, env=ENV, timeout=120)
            subprocess.run(mpirun(2, *base, "--output", two, "--tensor-parallel", "2"), check=True, env=ENV, timeout=120)
            with open(one) as f:
                a = [json.loads(l) for l in f]
            with open(two) as f:
                b = [json.loads(l) for l in f]
            self.assertEqual(len(a), 12)
            self.assertEqual([r["generated_ids"] for r in a], [r["generated_ids"] for r in b])
            self.assertTrue(all(r["status"] == "FINISHED" for r in b))

    def test_generate_with_two_ranks_equals_one_process(self):
        args = ["generate", "-m", MODEL, "--prompt", "And God said", "--max-new-tokens", "24", "--json"]
        one = json.loads(subprocess.run([LOOM, *args], check=True, env=ENV, capture_output=True, timeout=60).stdout)
        run = subprocess.run(mpirun(2, *args, "--tensor-parallel", "2"), check=True, env=ENV, capture_output=True, timeout=60)
        lines = run.stdout.decode().strip().splitlines()
        self.assertEqual(len(lines), 1, "only rank 0 prints")
        self.assertEqual(json.loads(lines[0])["generated_ids"], one["generated_ids"])

    def test_without_mpirun_is_a_named_error(self):
        r = subprocess.run([LOOM, "generate", "-m", MODEL, "--prompt-ids", "1,2", "--tensor-parallel", "2"],
                           env=ENV, capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("needs 2 processes started by mpirun", r.stderr.decode())

    def test_rank_count_mismatch_is_a_named_error(self):
        r = subprocess.run(mpirun(2, "generate", "-m", MODEL, "--prompt-ids", "1,2", "--tensor-parallel", "4"),
                           env=ENV, capture_output=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--tensor-parallel 4, but mpirun started 2 processes", r.stderr.decode())

    def _fault(self, sig, extra, expect):
        with tempfile.TemporaryDirectory() as d:
            req = os.path.join(d, "in.jsonl")
            write_requests(req, 64, 400)  # tens of seconds of work: the fault lands mid-generation
            p = subprocess.Popen(mpirun(2, "batch", "-m", MODEL, "--input", req, "--output", os.path.join(d, "o"),
                                        "--tensor-parallel", "2", *extra),
                                 env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            seen = b""
            while b"[batch]" not in seen:  # progress lines: generation is under way
                line = p.stdout.readline()
                self.assertTrue(line, "loom ended before generating: " + seen.decode(errors="replace"))
                seen += line
            pids = rank_pids(p.pid)
            self.assertIn(1, pids, seen.decode(errors="replace"))
            t0 = time.monotonic()
            os.kill(pids[1], sig)
            try:
                out, _ = p.communicate(timeout=30)
            finally:
                if p.poll() is None:
                    p.kill()
                    for pid in pids.values():
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
            elapsed = time.monotonic() - t0
            text = (seen + out).decode(errors="replace")
            self.assertLess(elapsed, 30, text)
            self.assertNotEqual(p.returncode, 0, text)
            self.assertRegex(text, expect)
            # mpirun may exit a moment before the OS has reaped a rank it killed
            # (a stopped one is continued, then ended): each must be gone within
            # the same 30 s of the fault.
            for pid in pids.values():
                while running(pid) and time.monotonic() - t0 < 30:
                    time.sleep(0.1)
                self.assertFalse(running(pid), f"rank process {pid} still running {time.monotonic() - t0:.1f} s after")
            print(f"\n{sig.name}: job ended {elapsed:.1f} s after; " + " | ".join(
                l.strip() for l in text.splitlines() if "rank 1" in l), flush=True)

    def test_a_killed_rank_ends_the_job_naming_it(self):
        self._fault(signal.SIGKILL, [], r"rank 1 with PID \d+ .*(exited|signal)")

    def test_a_stopped_rank_ends_the_job_within_the_group_timeout(self):
        self._fault(signal.SIGSTOP, ["--cpu-group-timeout", "3"],
                    r"tensor-parallel rank 0: .* got no answer from rank 1 within 3 s")


if __name__ == "__main__":
    unittest.main()
