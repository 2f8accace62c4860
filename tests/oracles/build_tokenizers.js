// Builds the small tokenizers the parity test needs beyond the real ones shipped on npm:
// WordPiece (BERT-style) trained with the `tokenizers` trainers, a WordPiece with
// NFD/StripAccents/Whitespace/Digits/Punctuation, a BPE with end-of-word suffixes, and a
// SentencePiece Unigram (Precompiled charsmap + Metaspace) trained by Debian's spm_train
// and converted the way Transformers converts T5/XLM-R models.
// Usage: node build_tokenizers.js CORPUS_JSON OUT_DIR
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');
const tk = require('tokenizers');

const [corpusPath, outDir] = process.argv.slice(2);
const corpus = JSON.parse(fs.readFileSync(corpusPath, 'utf8'));
fs.mkdirSync(outDir, { recursive: true });
const trainFile = path.join(outDir, 'train.txt');
// Train on a slice of the corpus (prose, code, scripts) so the vocabularies see real text
// but the tests still meet unseen characters.
fs.writeFileSync(trainFile, corpus.filter((c, i) => i % 3 !== 2 && !c.name.startsWith('odd'))
  .map((c) => c.text).join('\n'));

function finish(tokPath, edit) {
  const j = JSON.parse(fs.readFileSync(tokPath, 'utf8'));
  edit(j);
  fs.writeFileSync(tokPath, JSON.stringify(j, null, 1));
}

function addSpecials(j, names) {
  const vocab = j.model.vocab;
  let next = Object.keys(vocab).length;
  const ids = {};
  for (const n of names) {
    if (!(n in vocab)) vocab[n] = next++;
    ids[n] = vocab[n];
    j.added_tokens.push({ id: vocab[n], content: n, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  }
  return ids;
}

// ---- WordPiece, BERT style.
{
  const t = new tk.Tokenizer(tk.WordPiece.init({}, { unkToken: '[UNK]' }));
  t.setNormalizer(tk.bertNormalizer({ lowercase: true }));
  t.setPreTokenizer(tk.bertPreTokenizer());
  t.setDecoder(tk.wordPieceDecoder('##', true));
  t.train([trainFile]);
  const p = path.join(outDir, 'wordpiece_bert.json');
  t.save(p, false);
  finish(p, (j) => {
    const ids = addSpecials(j, ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']);
    j.post_processor = { type: 'BertProcessing', sep: ['[SEP]', ids['[SEP]']], cls: ['[CLS]', ids['[CLS]']] };
  });
}

// ---- WordPiece with a normalizer/pre-tokenizer Sequence and TemplateProcessing; one
// non-special added token with lstrip/rstrip and one single_word token.
{
  const t = new tk.Tokenizer(tk.WordPiece.init({}, { unkToken: '[UNK]' }));
  t.setNormalizer(tk.sequenceNormalizer([tk.nfdNormalizer(), tk.lowercase(), tk.stripAccentsNormalizer(), tk.replace('``', '"')]));
  t.setPreTokenizer(tk.sequencePreTokenizer([tk.whitespacePreTokenizer(), tk.digitsPreTokenizer(true), tk.punctuationPreTokenizer()]));
  t.setDecoder(tk.wordPieceDecoder('##', false));
  t.train([trainFile]);
  const p = path.join(outDir, 'wordpiece_alt.json');
  t.save(p, false);
  finish(p, (j) => {
    const ids = addSpecials(j, ['[UNK]', '[CLS]', '[SEP]']);
    let next = Math.max(...Object.values(j.model.vocab)) + 1;
    j.added_tokens.push({ id: next++, content: 'hello', single_word: false, lstrip: true, rstrip: true, normalized: true, special: false });
    j.added_tokens.push({ id: next++, content: 'ok', single_word: true, lstrip: false, rstrip: false, normalized: false, special: false });
    j.post_processor = {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '[CLS]', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '[SEP]', type_id: 0 } }],
      pair: [{ SpecialToken: { id: '[CLS]', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '[SEP]', type_id: 0 } },
        { Sequence: { id: 'B', type_id: 1 } }, { SpecialToken: { id: '[SEP]', type_id: 1 } }],
      special_tokens: {
        '[CLS]': { id: '[CLS]', ids: [ids['[CLS]']], tokens: ['[CLS]'] },
        '[SEP]': { id: '[SEP]', ids: [ids['[SEP]']], tokens: ['[SEP]'] },
      },
    };
  });
}

// ---- BPE with an end-of-word suffix, unk, NFKC + Strip, WhitespaceSplit, BPEDecoder,
// RobertaProcessing.
{
  const t = new tk.Tokenizer(tk.BPE.init({}, [], { unkToken: '<unk>', endOfWordSuffix: '</w>' }));
  t.setNormalizer(tk.sequenceNormalizer([tk.nfkcNormalizer(), tk.stripNormalizer(true, true)]));
  t.setPreTokenizer(tk.whitespaceSplitPreTokenizer());
  t.setDecoder(tk.bpeDecoder('</w>'));
  t.train([trainFile]);
  const p = path.join(outDir, 'bpe_suffix.json');
  t.save(p, false);
  finish(p, (j) => {
    j.model.end_of_word_suffix = '</w>';
    j.model.unk_token = '<unk>';
    const ids = addSpecials(j, ['<unk>', '<s>', '</s>']);
    j.post_processor = { type: 'RobertaProcessing', sep: ['</s>', ids['</s>']], cls: ['<s>', ids['<s>']], trim_offsets: true, add_prefix_space: false };
  });
}

// ---- SentencePiece Unigram → tokenizer.json.
function readVarint(b, pos) {
  let v = 0, shift = 0, byte;
  do { byte = b[pos++]; v += (byte & 0x7f) * 2 ** shift; shift += 7; } while (byte & 0x80);
  return [v, pos];
}
function parseMessage(b) {  // → [{field, wire, value}]
  const out = [];
  let pos = 0;
  while (pos < b.length) {
    let key;
    [key, pos] = readVarint(b, pos);
    const field = Math.floor(key / 8), wire = key & 7;
    if (wire === 0) { let v; [v, pos] = readVarint(b, pos); out.push({ field, wire, value: v }); }
    else if (wire === 1) { out.push({ field, wire, value: b.subarray(pos, pos + 8) }); pos += 8; }
    else if (wire === 2) { let len; [len, pos] = readVarint(b, pos); out.push({ field, wire, value: b.subarray(pos, pos + len) }); pos += len; }
    else if (wire === 5) { out.push({ field, wire, value: b.readFloatLE(pos) }); pos += 4; }
    else throw new Error('spm model: unsupported wire type ' + wire);
  }
  return out;
}
function spmToTokenizerJson(modelFile, byteFallback) {
  const m = parseMessage(fs.readFileSync(modelFile));
  const pieces = [];
  let charsmap = null;
  for (const f of m) {
    if (f.field === 1) {
      const p = { piece: '', score: 0, type: 1 };
      for (const g of parseMessage(Buffer.from(f.value))) {
        if (g.field === 1) p.piece = Buffer.from(g.value).toString('utf8');
        else if (g.field === 2) p.score = g.value;
        else if (g.field === 3) p.type = g.value;
      }
      pieces.push(p);
    } else if (f.field === 3) {
      for (const g of parseMessage(Buffer.from(f.value))) if (g.field === 2) charsmap = Buffer.from(g.value);
    }
  }
  const unkId = pieces.findIndex((p) => p.type === 2);
  const added = [];
  pieces.forEach((p, id) => {
    if (p.type === 2 || p.type === 3) added.push({ id, content: p.piece, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  });
  const eos = pieces.findIndex((p) => p.piece === '</s>');
  return {
    version: '1.0', truncation: null, padding: null, added_tokens: added,
    normalizer: { type: 'Sequence', normalizers: [
      { type: 'Precompiled', precompiled_charsmap: charsmap.toString('base64') },
      { type: 'Replace', pattern: { Regex: ' {2,}' }, content: ' ' }] },
    pre_tokenizer: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: true },
    post_processor: { type: 'TemplateProcessing',
      single: [{ Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '</s>', type_id: 0 } }],
      pair: [{ Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '</s>', type_id: 0 } }, { Sequence: { id: 'B', type_id: 0 } }, { SpecialToken: { id: '</s>', type_id: 0 } }],
      special_tokens: { '</s>': { id: '</s>', ids: [eos], tokens: ['</s>'] } } },
    decoder: byteFallback
      ? { type: 'Sequence', decoders: [{ type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: true }, { type: 'ByteFallback' }, { type: 'Fuse' }] }
      : { type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: true },
    model: { type: 'Unigram', unk_id: unkId, vocab: pieces.map((p) => [p.piece, p.score]), byte_fallback: byteFallback },
  };
}
for (const [name, byteFallback, vocab] of [['unigram_spm', false, 3000], ['unigram_bytefb', true, 3000]]) {
  const prefix = path.join(outDir, name);
  execFileSync('spm_train', [`--input=${trainFile}`, `--model_prefix=${prefix}`, `--vocab_size=${vocab}`, '--model_type=unigram',
    '--normalization_rule_name=nmt_nfkc', `--byte_fallback=${byteFallback}`, '--num_threads=1', '--minloglevel=2',
    '--character_coverage=0.995', '--max_sentence_length=100000'], { stdio: ['ignore', 'ignore', 'inherit'] });
  fs.writeFileSync(prefix + '.json', JSON.stringify(spmToTokenizerJson(prefix + '.model', byteFallback), null, 1));
}
console.error('build_tokenizers: done');
