"""TextStreamer / TextIteratorStreamer in generate(): the streamed text is the decoded
continuation, and an iterator streamer is consumed from another thread while generate runs."""
import threading

import numpy as np
import pytest

import loom


def continuation(model, tok, ids, n):
    out = model.generate(ids, max_new_tokens=n, do_sample=False)
    return out, tok.decode(out[0][ids.shape[1]:], skip_special_tokens=True)


def test_text_streamer_prints_the_continuation(default_model, tokenizer, capsys):
    ids = tokenizer("In the beginning", return_tensors="np")["input_ids"]
    out, text = continuation(default_model, tokenizer, ids, 30)
    streamed = default_model.generate(ids, max_new_tokens=30, do_sample=False,
                                      streamer=loom.TextStreamer(tokenizer, skip_prompt=True,
                                                                             skip_special_tokens=True))
    assert streamed.tolist() == out.tolist()
    assert capsys.readouterr().out == text + "\n"


def test_text_streamer_with_prompt(default_model, tokenizer, capsys):
    ids = tokenizer("And God said", return_tensors="np")["input_ids"]
    out = default_model.generate(ids, max_new_tokens=12, do_sample=False, streamer=loom.TextStreamer(tokenizer))
    assert capsys.readouterr().out == tokenizer.decode(out[0]) + "\n"  # special tokens shown, as upstream


def test_text_iterator_streamer_from_another_thread(default_model, tokenizer):
    ids = tokenizer("The LORD is my shepherd", return_tensors="np")["input_ids"]
    _, text = continuation(default_model, tokenizer, ids, 40)
    streamer = loom.TextIteratorStreamer(tokenizer, skip_prompt=True, timeout=60, skip_special_tokens=True)
    result = {}
    worker = threading.Thread(target=lambda: result.setdefault(
        "ids", default_model.generate(ids, max_new_tokens=40, do_sample=False, streamer=streamer)))
    worker.start()
    pieces = list(streamer)
    worker.join()
    assert "".join(pieces) == text
    assert len(pieces) > 5  # it streamed, not one piece at the end


def test_a_raising_streamer_stops_generate(default_model, tokenizer):
    class Broken(loom.BaseStreamer):
        def __init__(self):
            self.calls = 0

        def put(self, value):
            self.calls += 1
            if self.calls == 3:
                raise RuntimeError("streamer broke")

        def end(self):
            pass

    s = Broken()
    with pytest.raises(RuntimeError, match="streamer broke"):
        default_model.generate([[4090, 1130]], max_new_tokens=20, do_sample=False, streamer=s)
    assert s.calls == 3
    # The model is usable afterwards.
    assert default_model.generate([[4090, 1130]], max_new_tokens=3, do_sample=False).shape == (1, 5)
