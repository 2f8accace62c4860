#!/usr/bin/env node
// Encodes and decodes with a tokenizer.json through the Hugging Face
// `tokenizers` library, so the Python training code never needs its own BPE.
//
//   node tokenize.js encode-file TOKENIZER IN.txt OUT.bin
//       whole file as one string, no special tokens; ids as uint16 little-endian
//   node tokenize.js encode-json TOKENIZER < ["text", ...]  > [[ids], ...]
//       each text with special tokens (the post-processor prepends BOS)
//   node tokenize.js decode-json TOKENIZER < [[ids], ...]   > ["text", ...]
//       special tokens kept in the text
'use strict';
const fs = require('fs');
const { loadTokenizers } = require('./tokenizers_module.js');

async function main() {
  const [cmd, tokPath, ...rest] = process.argv.slice(2);
  if (!cmd || !tokPath) throw new Error('usage: tokenize.js encode-file|encode-json|decode-json TOKENIZER ...');
  const tok = loadTokenizers().Tokenizer.fromFile(tokPath);
  if (cmd === 'encode-file') {
    const [inPath, outPath] = rest;
    if (!inPath || !outPath) throw new Error('usage: tokenize.js encode-file TOKENIZER IN.txt OUT.bin');
    const text = fs.readFileSync(inPath, 'utf8');
    const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
    const vocab = tok.getVocabSize(true);
    if (vocab > 65536) throw new Error(`tokenize: vocab ${vocab} does not fit uint16`);
    const buf = Buffer.alloc(ids.length * 2);
    ids.forEach((id, i) => buf.writeUInt16LE(id, 2 * i));
    fs.writeFileSync(outPath, buf);
    console.log(`tokenize: ${inPath}: ${Buffer.byteLength(text)} bytes -> ${ids.length} tokens (${outPath})`);
  } else if (cmd === 'encode-json') {
    const texts = JSON.parse(fs.readFileSync(0, 'utf8'));
    const out = [];
    for (const t of texts) out.push((await tok.encode(t, null, { addSpecialTokens: true })).getIds());
    process.stdout.write(JSON.stringify(out) + '\n');
  } else if (cmd === 'decode-json') {
    const seqs = JSON.parse(fs.readFileSync(0, 'utf8'));
    const out = [];
    for (const ids of seqs) out.push(await tok.decode(ids, false));
    process.stdout.write(JSON.stringify(out) + '\n');
  } else {
    throw new Error(`tokenize: unknown command ${cmd}`);
  }
}

main().catch((e) => { console.error(e.message || e); process.exit(1); });
