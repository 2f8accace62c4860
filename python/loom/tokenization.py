"""AutoTokenizer over loom's tokenizer (tokenizer.json + tokenizer_config.json), with
Transformers' call signature; ids, tokens, offsets and decoded text equal the
`tokenizers` library's."""
import json
import os

import numpy as np

from . import _loom


class BatchEncoding(dict):
    """A dict (input_ids, attention_mask, …) whose keys are also attributes."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class PreTrainedTokenizer:
    def __init__(self, engine, path):
        self._tok = engine
        self.name_or_path = path
        self.tokenizer_config = json.loads(engine.tokenizer_config_json)
        self.chat_template = engine.chat_templates.get("default")
        pad = self.tokenizer_config.get("pad_token")
        if isinstance(pad, dict):
            pad = pad.get("content")
        self.pad_token = pad
        self.padding_side = self.tokenizer_config.get("padding_side", "right")

    @classmethod
    def from_pretrained(cls, path, **kwargs):
        """A checkpoint folder (tokenizer.json, tokenizer_config.json) or a tokenizer.json file."""
        path = os.fspath(path)
        if not os.path.exists(path):
            raise FileNotFoundError(f"'{path}' does not exist")
        return cls(_loom._Tokenizer.from_path(path), path)

    # ── special tokens and vocabulary ──
    @property
    def bos_token(self):
        return self._tok.bos_token

    @property
    def eos_token(self):
        return self._tok.eos_token

    @property
    def bos_token_id(self):
        return self._tok.bos_token_id

    @property
    def eos_token_id(self):
        return self._tok.eos_token_id

    @property
    def pad_token_id(self):
        return None if self.pad_token is None else self._tok.token_to_id(self.pad_token)

    @property
    def vocab_size(self):
        return self._tok.vocab_size

    def __len__(self):
        return self._tok.vocab_size

    def convert_ids_to_tokens(self, ids, skip_special_tokens=False):
        if isinstance(ids, (int, np.integer)):
            return self._tok.id_to_token(int(ids))
        return [self._tok.id_to_token(int(i)) for i in ids
                if not (skip_special_tokens and self._tok.is_special_id(int(i)))]

    def convert_tokens_to_ids(self, tokens):
        if isinstance(tokens, str):
            return self._tok.token_to_id(tokens)
        return [self._tok.token_to_id(t) for t in tokens]

    # ── encoding ──
    def encode(self, text, add_special_tokens=True):
        return list(self._tok.encode(text, add_special_tokens)["ids"])

    def __call__(self, text, add_special_tokens=True, return_offsets_mapping=False, return_tensors=None,
                 padding=False, return_attention_mask=True):
        single = isinstance(text, str)
        if not single and not (isinstance(text, (list, tuple)) and all(isinstance(t, str) for t in text)):
            raise TypeError("text must be a string or a list of strings")
        encodings = [self._tok.encode(text, add_special_tokens)] if single else \
            self._tok.encode_batch(list(text), add_special_tokens)
        ids = [list(e["ids"]) for e in encodings]
        masks = [[1] * len(i) for i in ids]
        offsets = [[tuple(o) for o in e["offsets"]] for e in encodings]
        if return_tensors is not None and return_tensors != "np":
            raise ValueError(f"return_tensors={return_tensors!r}: loom returns numpy arrays (\"np\") or lists (None)")
        if padding or (return_tensors == "np" and len({len(i) for i in ids}) > 1):
            if not padding:
                raise ValueError("the texts have different lengths: pass padding=True to return_tensors='np'")
            ids, masks, offsets = self._pad(ids, masks, offsets)
        out = BatchEncoding()
        if return_tensors == "np":
            out["input_ids"] = np.asarray(ids, dtype=np.int64)
            if return_attention_mask:
                out["attention_mask"] = np.asarray(masks, dtype=np.int64)
            if return_offsets_mapping:
                out["offset_mapping"] = np.asarray(offsets, dtype=np.int64).reshape(len(ids), -1, 2)
            return out
        pick = (lambda x: x[0]) if single else (lambda x: x)
        out["input_ids"] = pick(ids)
        if return_attention_mask:
            out["attention_mask"] = pick(masks)
        if return_offsets_mapping:
            out["offset_mapping"] = pick(offsets)
        return out

    def _pad(self, ids, masks, offsets):
        pad_id = self.pad_token_id
        if pad_id is None:
            pad_id = self.eos_token_id if self.eos_token_id is not None else 0
        longest = max(len(i) for i in ids)
        left = self.padding_side == "left"
        def pad(row, value):
            fill = [value] * (longest - len(row))
            return fill + row if left else row + fill
        return ([pad(i, pad_id) for i in ids], [pad(m, 0) for m in masks], [pad(o, (0, 0)) for o in offsets])

    # ── decoding ──
    def decode(self, token_ids, skip_special_tokens=False):
        ids = np.asarray(token_ids).reshape(-1).tolist() if not isinstance(token_ids, list) else token_ids
        return self._tok.decode([int(i) for i in ids], skip_special_tokens)

    def batch_decode(self, sequences, skip_special_tokens=False):
        return [self.decode(list(np.asarray(s).reshape(-1).tolist()), skip_special_tokens) for s in sequences]

    # ── chat ──
    def apply_chat_template(self, conversation, tools=None, documents=None, chat_template=None,
                            add_generation_prompt=False, tokenize=True, return_dict=False, return_tensors=None,
                            **kwargs):
        """Renders `conversation` with the checkpoint's chat template exactly as Transformers;
        tokenize=True encodes without adding special tokens again (the template holds them)."""
        templates = self._tok.chat_templates
        source = chat_template
        if source is None or source in templates:
            name = source or "default"
            if name not in templates:
                raise ValueError(f"{self.name_or_path}: no chat template (tokenizer_config.json has no chat_template)")
            source = templates[name]
        extras = dict(kwargs)
        if tools is not None:
            extras["tools"] = tools
        if documents is not None:
            extras["documents"] = documents
        text = _loom._render_chat_template(source, self.bos_token or "", self.eos_token or "",
                                           json.dumps(list(conversation)), add_generation_prompt, json.dumps(extras))
        if not tokenize:
            return text
        ids = self.encode(text, add_special_tokens=False)
        if return_tensors == "np":
            ids = np.asarray([ids], dtype=np.int64)
        if return_dict:
            mask = np.ones_like(ids) if return_tensors == "np" else [1] * len(ids)
            return BatchEncoding(input_ids=ids, attention_mask=mask)
        return ids

    def __repr__(self):
        return f"PreTrainedTokenizer(name_or_path='{self.name_or_path}', vocab_size={self.vocab_size})"


class AutoTokenizer:
    @staticmethod
    def from_pretrained(path, **kwargs):
        return PreTrainedTokenizer.from_pretrained(path, **kwargs)
