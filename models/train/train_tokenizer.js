#!/usr/bin/env node
// Trains the byte-level BPE tokenizer (GPT-2 pre-tokenization, Llama-3-style
// special tokens) with the Hugging Face `tokenizers` library's BPE trainer.
//
//   node train_tokenizer.js --train train.txt --vocab-size 8192 --out tokenizer.json
//
// The Node binding exposes `Tokenizer.train(files)` but not the trainer's
// options, so it always runs the default BpeTrainer (vocab limit 30000, no
// initial alphabet, no special tokens). We therefore train once, then rebuild
// the tokenizer.json ourselves:
//   * ids 0..255 are the 256 byte-level symbols in byte order (GPT-2's
//     bytes_to_unicode), so every byte is encodable even if the corpus never
//     contains it (the default trainer only keeps symbols it saw);
//   * then the trainer's merges, in the order it learned them, truncated to
//     fit. BPE training is greedy, so the first k merges of a longer run are
//     exactly the merges a run limited to k merges would learn;
//   * then the special tokens, as added tokens (like Llama 3 puts them last).
// The result is reloaded through the library and checked before it is written.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { loadTokenizers } = require('./tokenizers_module.js');

const SPECIAL_TOKENS = [
  '<|begin_of_text|>', // BOS, prepended by the post-processor
  '<|end_of_text|>',   // EOS
  '<|system|>',
  '<|user|>',
  '<|assistant|>',
  '<|end|>',           // ends one chat message
];

function parseArgs(argv) {
  const args = { vocabSize: 8192 };
  for (let i = 2; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) throw new Error(`train_tokenizer: ${a} needs a value`);
      return argv[++i];
    };
    if (a === '--train') args.train = next();
    else if (a === '--out') args.out = next();
    else if (a === '--vocab-size') args.vocabSize = parseInt(next(), 10);
    else throw new Error(`train_tokenizer: unknown argument ${a}`);
  }
  if (!args.train || !args.out) throw new Error('usage: train_tokenizer.js --train FILE --out tokenizer.json [--vocab-size N]');
  if (!(args.vocabSize > 256 + SPECIAL_TOKENS.length)) throw new Error(`train_tokenizer: --vocab-size ${args.vocabSize} is too small`);
  return args;
}

// GPT-2's reversible byte -> printable unicode map (what the ByteLevel
// pre-tokenizer emits): printable Latin-1 bytes map to themselves, the rest to
// U+0100 upwards in byte order.
function bytesToUnicode() {
  const keep = [];
  for (let b = 0x21; b <= 0x7e; b++) keep.push(b);
  for (let b = 0xa1; b <= 0xac; b++) keep.push(b);
  for (let b = 0xae; b <= 0xff; b++) keep.push(b);
  const map = new Array(256);
  let n = 0;
  for (let b = 0; b < 256; b++) {
    map[b] = keep.includes(b) ? String.fromCodePoint(b) : String.fromCodePoint(256 + n++);
  }
  return map;
}

function buildTokenizerJson(raw, vocabSize) {
  const merges = raw.model.merges.map((m) => (Array.isArray(m) ? m : m.split(' ')));
  const alphabet = bytesToUnicode();
  const vocab = {};
  alphabet.forEach((sym, b) => { vocab[sym] = b; });
  const nMerges = vocabSize - SPECIAL_TOKENS.length - 256;
  if (merges.length < nMerges) {
    throw new Error(`train_tokenizer: the trainer learned only ${merges.length} merges, need ${nMerges}; lower --vocab-size or give more text`);
  }
  const kept = [];
  for (const [a, b] of merges.slice(0, nMerges)) {
    if (!(a in vocab) || !(b in vocab)) throw new Error(`train_tokenizer: merge ${a} ${b} uses an unknown symbol`);
    const merged = a + b;
    if (merged in vocab) throw new Error(`train_tokenizer: merge ${a} ${b} repeats token ${merged}`);
    vocab[merged] = 256 + kept.length;
    kept.push([a, b]);
  }
  const bpeSize = 256 + kept.length;
  const added = SPECIAL_TOKENS.map((content, i) => ({
    id: bpeSize + i, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
  }));
  const bos = SPECIAL_TOKENS[0];
  const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: null,
    pre_tokenizer: byteLevel,
    post_processor: {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
      pair: [
        { SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
        { SpecialToken: { id: bos, type_id: 1 } }, { Sequence: { id: 'B', type_id: 1 } },
      ],
      special_tokens: { [bos]: { id: bos, ids: [bpeSize], tokens: [bos] } },
    },
    decoder: byteLevel,
    model: {
      type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges: kept,
    },
  };
}

async function check(tk, json, vocabSize) {
  const tok = tk.Tokenizer.fromString(JSON.stringify(json));
  const fail = (msg) => { throw new Error(`train_tokenizer: self-check failed: ${msg}`); };
  if (tok.getVocabSize(true) !== vocabSize) fail(`vocab size ${tok.getVocabSize(true)} != ${vocabSize}`);
  const samples = [
    'In the beginning God created the heaven and the earth.\n\nAnd the LORD said unto Moses,',
    'bytes never seen: \t tab, caf\u00e9, \u00fcber, \u2014 dash, \u{1F600}, \u0000 nul',
  ];
  for (const s of samples) {
    const enc = await tok.encode(s);
    const ids = enc.getIds();
    if (ids[0] !== vocabSize - SPECIAL_TOKENS.length) fail(`BOS not prepended to ${JSON.stringify(s)}`);
    const back = await tok.decode(ids, true);
    if (back !== s) fail(`round trip ${JSON.stringify(s)} -> ${JSON.stringify(back)}`);
  }
  const chat = await tok.encode('<|user|>\nHi<|end|>', null, { addSpecialTokens: false });
  const want = [tok.tokenToId('<|user|>'), tok.tokenToId('<|end|>')];
  const got = chat.getIds();
  if (got[0] !== want[0] || got[got.length - 1] !== want[1]) fail(`special tokens not matched in text: ${got}`);
}

async function main() {
  const args = parseArgs(process.argv);
  const tk = loadTokenizers();
  const trainer = new tk.Tokenizer(tk.BPE.empty());
  trainer.setPreTokenizer(tk.byteLevelPreTokenizer(false, true));
  trainer.train([args.train]);
  const tmp = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'loom-tok-')), 'raw.json');
  trainer.save(tmp, false);
  const raw = JSON.parse(fs.readFileSync(tmp, 'utf8'));
  fs.rmSync(path.dirname(tmp), { recursive: true, force: true });

  const json = buildTokenizerJson(raw, args.vocabSize);
  await check(tk, json, args.vocabSize);
  fs.writeFileSync(args.out, JSON.stringify(json, null, 2) + '\n');
  const ids = {};
  for (const t of json.added_tokens) ids[t.content] = t.id;
  console.log(`train_tokenizer: ${args.out}: vocab ${args.vocabSize} (256 bytes + ${json.model.merges.length} merges + ${SPECIAL_TOKENS.length} special) ${JSON.stringify(ids)}`);
}

main().catch((e) => { console.error(e.message || e); process.exit(1); });
