"""generate_batch and ContinuousBatchingManager from Python: equal to `loom batch`, result
handlers, several feeding threads, asyncio, Ctrl-C and interpreter exit."""
import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import loom
from conftest import BINARY_DIR, DEFAULT_MODEL, run_cli

PROMPTS = ["In the beginning", "And God said", "The LORD is my shepherd", "Blessed are the meek", "Jesus wept",
           "And the earth was without form"]

CB = dict(num_blocks=64, page_size=16, max_batch_tokens=64)


@pytest.fixture(scope="module")
def prompts(tokenizer):
    return [tokenizer.encode(p) for p in PROMPTS]


def cli_batch(prompts, *flags):
    lines = "".join(json.dumps({"id": f"r{i}", "prompt_ids": p}) + "\n" for i, p in enumerate(prompts))
    out = run_cli("batch", "--model", DEFAULT_MODEL, "-i", "-", "-o", "-", "--no-progress", "--num-blocks", "64",
                  "--page-size", "16", "--max-batch-tokens", "64", *flags, stdin=lines)
    return [json.loads(line) for line in out.splitlines()]


def test_generate_batch_equals_loom_batch_greedy(default_model, prompts):
    ours = default_model.generate_batch(prompts, continuous_batching_config=loom.ContinuousBatchingConfig(**CB),
                                        max_new_tokens=16, do_sample=False, progress_bar=False)
    theirs = cli_batch(prompts, "-n", "16", "--greedy")
    assert list(ours) == [f"req_{i}" for i in range(len(prompts))]
    for out, line in zip(ours.values(), theirs):
        assert out.status == loom.RequestStatus.FINISHED and out.is_finished()
        assert out.prompt_ids == line["prompt_ids"]
        assert out.generated_tokens == line["generated_ids"]
        assert out.text == line["text"]


def test_generate_batch_equals_loom_batch_sampling(default_model, prompts):
    cb = loom.ContinuousBatchingConfig(seed=5, **CB)
    ours = default_model.generate_batch(prompts, continuous_batching_config=cb, max_new_tokens=16, do_sample=True,
                                        temperature=0.8, top_k=0, top_p=0.95, progress_bar=False)
    theirs = cli_batch(prompts, "-n", "16", "--temperature", "0.8", "--top-p", "0.95", "--seed", "5")
    assert [o.generated_tokens for o in ours.values()] == [line["generated_ids"] for line in theirs]


def test_generate_batch_equals_generate(default_model, prompts):
    batch = default_model.generate_batch(prompts, max_new_tokens=12, do_sample=False, progress_bar=False,
                                         continuous_batching_config=CB)
    for p, out in zip(prompts, batch.values()):
        alone = default_model.generate([p], max_new_tokens=12, do_sample=False)
        assert alone[0].tolist()[len(p):] == out.generated_tokens


VERSE = ("In the beginning God created the heaven and the earth. And the earth was without form, and void; and "
         "darkness was upon the face of the deep. ")


def test_prompt_lookup_gives_the_same_tokens_as_plain_decoding(default_model, tokenizer, prompts):
    # A prompt that repeats, so that drafts are made and accepted, among ones that do not.
    batch_prompts = [tokenizer.encode(VERSE * 2 + "In the beginning")] + prompts[:3]
    plain = default_model.generate_batch(batch_prompts, max_new_tokens=24, do_sample=False, progress_bar=False,
                                         continuous_batching_config=CB)
    # (adaptive_speculation off: drafts whatever the step cost, so that some are surely accepted)
    spec = default_model.generate_batch(batch_prompts, max_new_tokens=24, do_sample=False, progress_bar=False,
                                        continuous_batching_config=dict(CB, adaptive_speculation=False),
                                        prompt_lookup_num_tokens=6)
    assert [o.generated_tokens for o in spec.values()] == [o.generated_tokens for o in plain.values()]
    assert all(o.drafted_tokens == 0 for o in plain.values())
    assert list(spec.values())[0].accepted_draft_tokens > 0
    alone_plain = default_model.generate([batch_prompts[0]], max_new_tokens=24, do_sample=False)
    alone_spec = default_model.generate([batch_prompts[0]], max_new_tokens=24, do_sample=False,
                                        prompt_lookup_num_tokens=6)
    assert alone_spec.tolist() == alone_plain.tolist()
    assert alone_plain[0].tolist()[len(batch_prompts[0]):] == list(plain.values())[0].generated_tokens
    with pytest.raises(ValueError, match="prompt_lookup_num_tokens"):
        loom.GenerationConfig(prompt_lookup_num_tokens=-2)
    # loom batch: the flag, and the counts in each line.
    lines = cli_batch(batch_prompts, "-n", "24", "--greedy", "--prompt-lookup-num-tokens", "6",
                      "--adaptive-speculation", "false")
    assert [line["generated_ids"] for line in lines] == [o.generated_tokens for o in plain.values()]
    assert lines[0]["accepted_draft_tokens"] > 0


def test_timestamps_logprobs_and_persistent_manager(default_model, prompts):
    cb = loom.ContinuousBatchingConfig(return_logprobs=True, **CB)
    out = default_model.generate_batch(prompts[:2], continuous_batching_config=cb, record_timestamps=True,
                                       persistent_manager=True, max_new_tokens=5, do_sample=False, progress_bar=False)
    o = out["req_0"]
    assert len(o.timestamps) == len(o.generated_tokens) == len(o.logprobs) == 5
    assert o.lifespan[0] <= o.lifespan[1] and o.created_time > 0
    again = default_model.generate_batch(prompts[:2], persistent_manager=True, max_new_tokens=5, do_sample=False,
                                         progress_bar=False)
    assert [x.generated_tokens for x in again.values()] == [x.generated_tokens for x in out.values()]
    default_model.destroy_cached_continuous_batching_manager()


def test_bad_config_values_name_the_field():
    with pytest.raises(ValueError, match="page_size"):
        loom.ContinuousBatchingConfig(page_size=0)
    with pytest.raises(ValueError, match="scheduler_type"):
        loom.ContinuousBatchingConfig(scheduler_type="lifo")
    with pytest.raises(ValueError, match="no_such_field"):
        loom.ContinuousBatchingConfig(no_such_field=1)
    assert "use_cuda_graph" in " ".join(loom.ContinuousBatchingConfig(use_cuda_graph=True).cpu_no_op_fields())
    assert {"page_size", "num_blocks", "max_batch_tokens", "kv_cache_dtype", "cpu_offload_path", "cache_type_k",
            "cache_type_v", "kv_cache_rotation"} <= set(loom.ContinuousBatchingConfig.fields())
    with pytest.raises(ValueError, match="cache_type_k"):
        loom.ContinuousBatchingConfig(cache_type_k="q4_1")
    with pytest.raises(ValueError, match="kv_cache_rotation"):
        loom.ContinuousBatchingConfig(kv_cache_rotation="maybe")


def test_quantized_kv_cache_batched_equals_generate_alone(default_model, prompts):
    # A q8_0 K with an f16 V, through the manager and through generate(): the same tokens.
    cb = loom.ContinuousBatchingConfig(page_size=16, num_blocks=64, cache_type_k="q8_0", cache_type_v="float16")
    out = default_model.generate_batch(prompts[:3], continuous_batching_config=cb, max_new_tokens=6, do_sample=False,
                                       progress_bar=False)
    for p, r in zip(prompts[:3], out.values()):
        alone = default_model.generate([p], max_new_tokens=6, do_sample=False, cache_type_k="q8_0",
                                       cache_type_v="float16")
        assert alone[0].tolist()[len(p):] == r.generated_tokens
        assert len(r.generated_tokens) == 6


def test_manager_api(default_model, prompts):
    manager = default_model.init_continuous_batching(continuous_batching_config=CB, max_new_tokens=8, do_sample=False)
    assert not manager.is_running()
    manager.start()
    assert manager.is_running()
    rid = manager.add_request(prompts[0], request_id="a", max_new_tokens=6)
    assert rid == "a"
    out = manager.get_result(request_id="a", timeout=30)
    while out is not None and not out.is_finished():
        out = manager.get_result(request_id="a", timeout=30)
    assert out.status == loom.RequestStatus.FINISHED and len(out.generated_tokens) == 6

    streamed = manager.add_request(prompts[1], streaming=True, max_new_tokens=5)
    steps = list(manager.request_id_iter(streamed))
    assert [len(s.generated_tokens) for s in steps] == [1, 2, 3, 4, 5] and steps[-1].is_finished()

    ids = manager.add_requests(prompts[2:4], max_new_tokens=4)
    got = {}
    for o in manager:
        got[o.request_id] = o
        if len(got) == 2:
            break
    assert set(got) == set(ids)

    with pytest.raises(KeyError):
        manager.cancel_request("no_such_request")
    with pytest.raises(ValueError):
        manager.add_request([], max_new_tokens=3)
    with pytest.raises(ValueError):
        manager.add_request([999999], max_new_tokens=3)
    with manager.pause():
        paused = manager.add_request(prompts[0], max_new_tokens=2)
        assert manager.get_result(request_id=paused, timeout=0.3) is None
    assert manager.get_result(request_id=paused, timeout=30).is_finished()
    manager.stop(block=True)
    assert not manager.is_running()
    manager.destroy()
    with pytest.raises(loom.LoomError):
        manager.add_request(prompts[0])


def test_cancel_request_fails_it(default_model, prompts):
    with default_model.continuous_batching_context_manager(continuous_batching_config=CB, do_sample=False) as m:
        rid = m.add_request(prompts[0], max_new_tokens=500, eos_token_id=[], streaming=True)
        m.cancel_request(rid)
        last = m.get_result(request_id=rid, timeout=30)
        while not last.is_finished():
            last = m.get_result(request_id=rid, timeout=30)
        assert last.status == loom.RequestStatus.FAILED and last.finish_reason == "cancelled"


def test_result_handlers_and_feeding_threads(default_model, prompts):
    results, lock = {}, threading.Lock()

    def handler(out):
        with lock:
            results[out.request_id] = out

    with default_model.continuous_batching_context_manager(continuous_batching_config=CB, max_new_tokens=6,
                                                           do_sample=False) as m:
        def feed(k):
            for i, p in enumerate(prompts):
                rid = m.add_request(p, request_id=f"t{k}_{i}")
                m.register_result_handler(rid, handler)

        threads = [threading.Thread(target=feed, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        deadline = time.time() + 60
        while len(results) < 4 * len(prompts) and time.time() < deadline:
            time.sleep(0.02)
    assert len(results) == 4 * len(prompts)
    # Every thread's copy of a prompt generated the same greedy tokens.
    for i in range(len(prompts)):
        assert len({tuple(results[f"t{k}_{i}"].generated_tokens) for k in range(4)}) == 1


def test_result_handler_in_asyncio(default_model, prompts):
    async def main():
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        seen_on = []

        def on_output(out):
            seen_on.append(threading.get_ident())
            if out.is_finished() and not done.done():
                done.set_result(out)

        m = default_model.init_continuous_batching(continuous_batching_config=CB, max_new_tokens=4, do_sample=False)
        m.start()
        rid = m.add_request(prompts[0])
        m.register_result_handler(rid, on_output)
        out = await asyncio.wait_for(done, 60)
        m.stop()
        m.destroy()
        return out, seen_on

    out, seen_on = asyncio.run(main())
    assert out.is_finished() and set(seen_on) == {threading.get_ident()}  # called on the loop's thread


def run_python(code, **kwargs):
    env = dict(os.environ, PYTHONPATH=os.path.join(BINARY_DIR, "python"))
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kwargs)


@pytest.mark.parametrize("call", ["generate", "generate_batch"])
def test_ctrl_c_raises_keyboard_interrupt(call):
    work = {
        "generate": "m.generate([[4090, 1130]], max_new_tokens=100000, eos_token_id=[], do_sample=False)",
        "generate_batch": "m.generate_batch([[4090, 1130]] * 4, max_new_tokens=100000, eos_token_id=[], "
                          "progress_bar=False, continuous_batching_config=dict(num_blocks=4096, page_size=64))",
    }[call]
    code = f"""
import loom, sys
m = loom.AutoModelForCausalLM.from_pretrained({DEFAULT_MODEL!r})
print("ready", flush=True)
try:
    {work}
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(0)
print("finished", flush=True)
"""
    p = run_python(code)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert out.strip() == "interrupted"


def test_interpreter_exit_with_a_running_manager():
    code = f"""
import loom
m = loom.AutoModelForCausalLM.from_pretrained({DEFAULT_MODEL!r})
mgr = m.init_continuous_batching(max_new_tokens=100000, eos_token_id=[], do_sample=False)
mgr.start()
for i in range(4):
    rid = mgr.add_request([4090, 1130, 258])
    mgr.register_result_handler(rid, lambda out: None)
mgr.add_request([4090, 258], streaming=True)
print("exiting", flush=True)
"""
    p = run_python(code)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert out.strip() == "exiting"


def test_ctrl_c_interrupts_a_blocking_get_result():
    code = f"""
import loom, sys
m = loom.AutoModelForCausalLM.from_pretrained({DEFAULT_MODEL!r})
mgr = m.init_continuous_batching()
mgr.start()
print("ready", flush=True)
try:
    mgr.get_result()  # nothing was added: waits until interrupted
except KeyboardInterrupt:
    mgr.stop()
    print("interrupted", flush=True)
    sys.exit(0)
"""
    p = run_python(code)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert out.strip() == "interrupted"


def test_a_python_thread_runs_while_generate_batch_computes(default_model, prompts):
    ticks, stop = [], threading.Event()
    t = threading.Thread(target=lambda: [ticks.append(1) for _ in iter(lambda: stop.is_set(), True)])
    t.start()
    before = len(ticks)
    default_model.generate_batch(prompts, max_new_tokens=48, do_sample=False, eos_token_id=[], progress_bar=False,
                                 continuous_batching_config=CB)
    during = len(ticks) - before
    stop.set()
    t.join()
    assert during > 1000
