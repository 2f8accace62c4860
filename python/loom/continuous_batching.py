"""ContinuousBatchingManager with upstream's methods over loom's manager. Blocking calls
release the GIL and wake up for Ctrl-C; result handlers are Python callables (posted to
the caller's asyncio loop when registered from inside one). Managers still running at
interpreter exit are stopped before Python shuts down, so exit neither hangs nor crashes.

No lifecycle call waits for something that cannot happen: where it would, it raises
FailedPreconditionError saying why. Inside `with manager.pause():` a blocking soft
stop(), join() without a timeout and start() of a stopping manager raise (the loop cannot
finish while paused; stop(hard_stop=True), stop(block=False) and destroy() work there).
In a result handler run inline (on the batching thread, or inside register_result_handler
for outputs queued before it), pause(), join() and stop(block=True) raise (the loop waits
for the handler); stop(block=False) and destroy() work there."""
import asyncio
import atexit
import contextlib
import weakref

from . import _loom
from .constraints import CONSTRAINT_ARGS, pop_constraint

_live_managers = weakref.WeakSet()
_models = weakref.WeakSet()  # their generate_batch(persistent_manager=True) managers

_PROCESSOR_ARGS = ("do_sample", "temperature", "top_k", "top_p", "min_p", "repetition_penalty")


@atexit.register
def _stop_live_managers():
    for manager in list(_live_managers):
        with contextlib.suppress(Exception):
            manager.destroy()
    for model in list(_models):
        with contextlib.suppress(Exception):
            model.destroy_cached_continuous_batching_manager()


def _request_options(request_id=None, max_new_tokens=None, streaming=False, record_timestamps=False,
                     eos_token_id=None, seed=None, stop_strings=None, num_return_sequences=None, queue_timeout=None,
                     **logit_processor_kwargs):
    unknown = sorted(set(logit_processor_kwargs) - set(_PROCESSOR_ARGS))
    if unknown:
        raise ValueError(f"add_request: unknown arguments {', '.join(unknown)}")
    o = _loom._RequestOptions()
    o.request_id = request_id
    o.max_new_tokens = max_new_tokens
    o.streaming = streaming
    o.record_timestamps = record_timestamps
    if eos_token_id is not None:
        o.eos_token_ids = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
    o.seed = seed
    if stop_strings:
        o.stop_strings = [stop_strings] if isinstance(stop_strings, str) else list(stop_strings)
    o.num_return_sequences = num_return_sequences
    o.queue_timeout = queue_timeout
    for key, value in logit_processor_kwargs.items():
        setattr(o, key, value)
    return o


def _token_list(input_ids):
    if hasattr(input_ids, "tolist"):
        input_ids = input_ids.tolist()
    return [int(i) for i in input_ids]


class ContinuousBatchingManager:
    """Made by model.init_continuous_batching(); start() runs the batching loop on a
    background thread. Also a context manager (start on enter, stop on exit)."""

    def __init__(self, engine, model_handle=None):
        self._engine = engine
        self._model_handle = model_handle  # compiles add_request's constraints
        _live_managers.add(self)

    # ── requests ──
    def add_request(self, input_ids, request_id=None, max_new_tokens=None, streaming=False, record_timestamps=False,
                    eos_token_id=None, **kwargs):
        constraint = None
        if any(k in kwargs for k in CONSTRAINT_ARGS):
            if self._model_handle is None:
                raise ValueError("add_request: constraints need a manager made by model.init_continuous_batching")
            constraint = pop_constraint(self._model_handle, kwargs)
        options = _request_options(request_id, max_new_tokens, streaming, record_timestamps, eos_token_id, **kwargs)
        options.constraint = constraint
        return self._engine.add_request(_token_list(input_ids), options)

    def add_requests(self, inputs, max_new_tokens=None, streaming=False, record_timestamps=False, **kwargs):
        return [self.add_request(ids, None, max_new_tokens, streaming, record_timestamps, **kwargs) for ids in inputs]

    def cancel_request(self, request_id):
        try:
            self._engine.cancel_request(request_id)
        except _loom.NotFoundError as e:
            raise KeyError(str(e)) from None

    # ── results ──
    def get_result(self, request_id=None, timeout=None):
        """The next output (of request_id when given); None after `timeout` seconds, or
        once the manager is stopped with nothing left."""
        return self._engine.get_result(request_id, timeout)

    def __iter__(self):
        """Every output while the manager runs (and those left after it stopped)."""
        while True:
            out = self._engine.get_result(None, 0.1)
            if out is not None:
                yield out
            elif not self._engine.is_running():
                return

    def request_id_iter(self, request_id):
        """The outputs of one request, blocking, until its final one."""
        while True:
            out = self._engine.get_result(request_id, None)
            if out is None:
                return
            yield out
            if out.is_finished():
                return

    def register_result_handler(self, request_id, callback):
        """callback(output) for each output of request_id, on the batching thread — or,
        registered from inside a running asyncio loop, through loop.call_soon_threadsafe
        (a coroutine function is scheduled as a task there)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            if asyncio.iscoroutinefunction(callback):
                coroutine = callback
                handler = lambda out: loop.call_soon_threadsafe(lambda: loop.create_task(coroutine(out)))
            else:
                handler = lambda out: loop.call_soon_threadsafe(callback, out)
        else:
            handler = callback
        self._engine.register_result_handler(request_id, handler)

    # ── lifecycle ──
    def start(self):
        self._engine.start()

    def stop(self, block=True, timeout=None, keep_for_next_session=False, hard_stop=False):
        self._engine.stop(block, timeout, keep_for_next_session, hard_stop)

    def join(self, stop_trigger_time=None, timeout=None):
        """Waits for the batching loop to end: True once it has, False after `timeout` seconds."""
        return self._engine.join(timeout)

    def is_running(self):
        return self._engine.is_running()

    def warmup(self):
        self._engine.warmup()

    def destroy(self):
        """Hard stop, free everything; idempotent. The manager cannot start again."""
        self._engine.destroy()
        _live_managers.discard(self)

    def switch_to_cb_friendly_attn(self, model=None, auto_switch_to_flash=True):
        """Upstream switches the model to a paged (or flash) attention implementation
        here. loom's CPU attention always reads the paged KV cache, so there is nothing
        to switch: a no-op that checks its arguments and returns None, as upstream's."""
        from .modeling import LoomForCausalLM
        if model is not None and not isinstance(model, LoomForCausalLM):
            raise TypeError(f"switch_to_cb_friendly_attn: model must be a loom model, not {type(model).__name__}")
        if not isinstance(auto_switch_to_flash, bool):
            raise TypeError("switch_to_cb_friendly_attn: auto_switch_to_flash must be a bool")
        return None

    @contextlib.contextmanager
    def pause(self):
        """Parks the loop between steps for the duration of the block (nothing is lost)."""
        guard = self._engine.pause()
        try:
            yield self
        finally:
            guard.release()

    def stats(self):
        return self._engine.stats()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop(block=True)
        return False
