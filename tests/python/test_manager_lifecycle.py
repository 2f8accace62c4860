"""pause / stop / join / destroy of a ContinuousBatchingManager called from the main thread,
from a result handler and from other threads: each ends or raises a clear error, never
hangs. Every scenario runs in a child interpreter under a timeout, so a hang fails the test
(naming the last step reached) instead of blocking the suite."""
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import BINARY_DIR, DEFAULT_MODEL, SOURCE_DIR

TIMEOUT = 120  # seconds per scenario: far above what any of them takes

PRELUDE = f"""
import sys, threading, time
import loom
model = loom.AutoModelForCausalLM.from_pretrained({DEFAULT_MODEL!r})
CB = dict(num_blocks=64, page_size=16, max_batch_tokens=16)

def manager():
    m = model.init_continuous_batching(continuous_batching_config=CB, do_sample=False)
    m.start()
    return m

def step(name):
    print("STEP", name, flush=True)

def raises(fn, *words):
    try:
        fn()
    except loom.FailedPreconditionError as e:
        for w in words:
            assert w in str(e), (w, str(e))
        return str(e)
    raise AssertionError("did not raise")
"""


def run_scenario(body):
    code = PRELUDE + textwrap.dedent(body) + "\nprint('DONE', flush=True)\n"
    env = dict(os.environ, PYTHONPATH=os.path.join(BINARY_DIR, "python"), LOOM_SOURCE_DIR=SOURCE_DIR)
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT, env=env)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        steps = [line for line in out.splitlines() if line.startswith("STEP")]
        pytest.fail(f"hung after {steps[-1] if steps else 'start'} (killed after {TIMEOUT} s)")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert r.stdout.rstrip().endswith("DONE"), r.stdout
    return r


def test_main_thread_inside_pause():
    run_scenario("""
        step("soft stop inside pause raises, as upstream")
        m = manager()
        rid = m.add_request([1, 2, 3], max_new_tokens=30)
        with m.pause():
            raises(lambda: m.stop(), "holds pause()", "leave the pause")
            raises(lambda: m.stop(block=True, timeout=5), "holds pause()")
            assert m.is_running()
            raises(lambda: m.join(), "holds pause()")
            assert m.join(timeout=0.05) is False
            m.stop(block=False)  # taken: the loop finishes once the pause ends
            raises(lambda: m.start(), "holds pause()")
        assert m.join(timeout=60) is True
        out = m.get_result(rid, timeout=0)
        assert out is not None and out.status == loom.RequestStatus.FINISHED and len(out.generated_tokens) == 30

        step("hard stop inside pause ends the loop")
        m = manager()
        with m.pause():
            rid = m.add_request([1, 2, 3], max_new_tokens=30)  # paused: it cannot finish first
            m.stop(hard_stop=True)
            assert not m.is_running()
            assert m.join() is True
        assert m.get_result(rid, timeout=0).status == loom.RequestStatus.FAILED

        step("destroy inside pause")
        m = manager()
        m.add_request([1, 2, 3], max_new_tokens=30)
        with m.pause():
            m.destroy()
            assert not m.is_running()
        raises(lambda: m.pause().__enter__(), "destroyed")
        m.destroy()  # idempotent

        step("nested pauses, then the context manager's stop")
        with model.init_continuous_batching(continuous_batching_config=CB) as m:
            with m.pause():
                with m.pause():
                    rid = m.add_request([4, 5], max_new_tokens=3)
            assert len(m.get_result(rid, timeout=60).generated_tokens) == 3
    """)


def test_result_handler_calls():
    run_scenario("""
        def handled(call):
            m = manager()
            seen, done = [], threading.Event()
            def handler(out):
                if not seen:
                    try:
                        seen.append(("ok", call(m)))
                    except Exception as e:
                        seen.append((type(e).__name__, str(e)))
                    done.set()
            rid = m.add_request([1, 2, 3], max_new_tokens=30, streaming=True)
            m.register_result_handler(rid, handler)
            assert done.wait(60), "the handler never ran"
            return m, seen[0]

        for name, call in [("pause", lambda m: m.pause().__enter__()), ("join", lambda m: m.join()),
                           ("join with timeout", lambda m: m.join(timeout=0.1)),
                           ("blocking stop", lambda m: m.stop()),
                           ("blocking hard stop", lambda m: m.stop(hard_stop=True))]:
            step(name + " from a handler raises")
            m, (kind, message) = handled(call)
            assert kind == "FailedPreconditionError", (name, kind, message)
            assert "result handler" in message, message
            m.stop(block=True, timeout=60)
            assert not m.is_running()
            m.destroy()

        step("a handler given queued outputs by register_result_handler")
        m = manager()
        rid = m.add_request([1, 2, 3], max_new_tokens=30, streaming=True)
        while m.stats()["generated_tokens"] < 2:
            time.sleep(0.001)
        seen = []
        def queued(out):
            if not seen:
                for call in (lambda: m.pause().__enter__(), m.join, m.stop):
                    try:
                        call()
                        seen.append("no error")
                    except loom.FailedPreconditionError as e:
                        seen.append(str(e))
        m.register_result_handler(rid, queued)  # delivers the queued outputs on this thread
        assert len(seen) == 3 and all("result handler" in s for s in seen), seen
        m.stop(block=True, timeout=60)
        m.destroy()

        step("non-blocking stop from a handler")
        m, (kind, message) = handled(lambda m: m.stop(block=False))
        assert kind == "ok", message
        assert m.join(timeout=60) is True
        assert m.stats()["finished"] == 1

        step("destroy from a handler")
        m, (kind, message) = handled(lambda m: m.destroy())
        assert kind == "ok", message
        deadline = time.time() + 60
        while m.is_running() and time.time() < deadline:
            time.sleep(0.01)
        assert not m.is_running()
        try:
            m.add_request([1])
            raise AssertionError("add_request after destroy")
        except loom.FailedPreconditionError as e:
            assert "destroyed" in str(e)
        m.destroy()

        step("a handler holding the last reference destroys its manager")
        m = manager()
        box, done = [m], threading.Event()
        def last(out):
            if out.is_finished():
                box.pop().destroy()
                done.set()
        m.register_result_handler(m.add_request([1, 2], max_new_tokens=3), last)
        del m
        assert done.wait(60)
    """)


def test_other_threads():
    run_scenario("""
        step("stop waits for another thread's pause")
        m = manager()
        rid = m.add_request([1, 2, 3], max_new_tokens=20)
        holding, release = threading.Event(), threading.Event()
        def holder():
            with m.pause():
                holding.set()
                release.wait(60)
        t = threading.Thread(target=holder)
        t.start()
        assert holding.wait(60)
        threading.Timer(0.2, release.set).start()
        m.stop(block=True, timeout=60)
        t.join(60)
        assert m.get_result(rid, timeout=0).status == loom.RequestStatus.FINISHED

        step("another thread stops while this one holds pause")
        m = manager()
        m.add_request([1, 2, 3], max_new_tokens=20)
        result = []
        with m.pause():
            t = threading.Thread(target=lambda: result.append(m.stop(block=True, timeout=60)))
            t.start()
            t.join(0.2)
            assert t.is_alive()  # waits for this thread's pause, as it should
        t.join(60)
        assert not t.is_alive() and not m.is_running()

        step("join from one thread, destroy from another, get_result waiting in a third")
        m = manager()
        m.add_request([1, 2, 3], max_new_tokens=200)
        joined, got = [], []
        tj = threading.Thread(target=lambda: joined.append(m.join()))
        tg = threading.Thread(target=lambda: got.append(m.get_result("never")))
        tj.start(); tg.start()
        td = threading.Thread(target=m.destroy)
        td.start()
        for t in (td, tj, tg):
            t.join(60)
            assert not t.is_alive()
        assert joined == [True] and got == [None]

        step("two threads destroy at once, one inside pause")
        m = manager()
        m.add_request([1, 2, 3], max_new_tokens=200)
        def paused_destroy():
            with m.pause():
                m.destroy()
        ts = [threading.Thread(target=paused_destroy), threading.Thread(target=m.destroy)]
        for t in ts: t.start()
        for t in ts:
            t.join(60)
            assert not t.is_alive()
        assert not m.is_running()

        step("pause from another thread while a soft stop drains")
        m = manager()
        rid = m.add_request([1, 2, 3], max_new_tokens=20)
        m.stop(block=False)
        def pauser():
            with m.pause():
                time.sleep(0.05)
        t = threading.Thread(target=pauser)
        t.start(); t.join(60)
        assert m.join(timeout=60) is True
        assert m.get_result(rid, timeout=0).status == loom.RequestStatus.FINISHED
    """)


def test_switch_to_cb_friendly_attn(default_model):
    import loom
    manager = default_model.init_continuous_batching()
    try:
        # Upstream's signature and return value; CPU attention is always paged.
        assert manager.switch_to_cb_friendly_attn(default_model) is None
        assert manager.switch_to_cb_friendly_attn(default_model, auto_switch_to_flash=False) is None
        with pytest.raises(TypeError, match="loom model"):
            manager.switch_to_cb_friendly_attn("not a model")
    finally:
        manager.destroy()
    assert loom.ContinuousBatchingManager.switch_to_cb_friendly_attn.__doc__
