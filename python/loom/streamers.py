"""Streamers as Transformers': generate() calls put() with the prompt, then with each
new token, then end(). Text comes from loom's incremental detokenizer, so each token
costs a small window decode rather than re-decoding everything so far."""
import queue
import sys

import numpy as np

from . import _loom


class BaseStreamer:
    def put(self, value):
        raise NotImplementedError

    def end(self):
        raise NotImplementedError


class TextStreamer(BaseStreamer):
    """Prints text to stdout as soon as it is final (whole characters, leading spaces kept).
    skip_special_tokens (a decode kwarg upstream) defaults to False, as there."""

    def __init__(self, tokenizer, skip_prompt=False, skip_special_tokens=False, **decode_kwargs):
        self.tokenizer = tokenizer
        self.skip_prompt = skip_prompt
        self.skip_special_tokens = skip_special_tokens
        self._detok = None
        self._next_is_prompt = True

    def put(self, value):
        ids = np.asarray(value).reshape(-1).tolist()
        if self._next_is_prompt:
            self._next_is_prompt = False
            self._detok = _loom._IncrementalDetokenizer(self.tokenizer._tok, self.skip_special_tokens,
                                                        [] if not self.skip_prompt else ids)
            if self.skip_prompt:
                return
        text = "".join(self._detok.push(int(i)) for i in ids)
        if text:
            self.on_finalized_text(text)

    def end(self):
        text = self._detok.flush() if self._detok else ""
        self._next_is_prompt = True
        self._detok = None
        self.on_finalized_text(text, stream_end=True)

    def on_finalized_text(self, text, stream_end=False):
        print(text, flush=True, end="" if not stream_end else None)


class TextIteratorStreamer(TextStreamer):
    """Text pieces through an iterator, for a consumer in another thread (generate()
    releases the GIL while it computes). `timeout`: seconds each next() waits (queue.Empty)."""

    def __init__(self, tokenizer, skip_prompt=False, timeout=None, **decode_kwargs):
        super().__init__(tokenizer, skip_prompt, **decode_kwargs)
        self.text_queue = queue.Queue()
        self.stop_signal = None
        self.timeout = timeout

    def on_finalized_text(self, text, stream_end=False):
        if text:
            self.text_queue.put(text, timeout=self.timeout)
        if stream_end:
            self.text_queue.put(self.stop_signal, timeout=self.timeout)

    def __iter__(self):
        return self

    def __next__(self):
        value = self.text_queue.get(timeout=self.timeout)
        if value is self.stop_signal:
            raise StopIteration()
        return value
