// Encodes/decodes the corpus with the `tokenizers` library (the reference) and writes,
// per tokenizer, ORACLE_DIR/<name>.json: ids, tokens, char offsets and special-token mask
// with and without special tokens, the decoded text (plain and skip_special_tokens), and
// decodes of random id sequences.
// Usage: node run_oracle.js CORPUS_JSON ORACLE_DIR name=tokenizer.json ...
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');

const [corpusPath, outDir, ...specs] = process.argv.slice(2);
const corpus = JSON.parse(fs.readFileSync(corpusPath, 'utf8'));

let seed = 0xC0FFEE;
function rnd() {
  seed ^= seed << 13; seed >>>= 0;
  seed ^= seed >>> 17;
  seed ^= seed << 5; seed >>>= 0;
  return seed / 4294967296;
}

async function encodeOne(tok, text, addSpecial) {
  const e = await tok.encode(text, null, { addSpecialTokens: addSpecial });
  return { ids: e.getIds(), tokens: e.getTokens(), offsets: e.getOffsets().flat(), special_mask: e.getSpecialTokensMask() };
}

async function main() {
  fs.mkdirSync(outDir, { recursive: true });
  for (const spec of specs) {
    const eq = spec.indexOf('=');
    const name = spec.slice(0, eq), file = spec.slice(eq + 1);
    const tok = Tokenizer.fromFile(file);
    const cases = [];
    for (const c of corpus) {
      const w = await encodeOne(tok, c.text, true);
      const wo = await encodeOne(tok, c.text, false);
      cases.push({
        name: c.name, with: w, without: wo,
        decode: await tok.decode(w.ids, false),
        decode_skip: await tok.decode(w.ids, true),
        decode_without: await tok.decode(wo.ids, false),
      });
    }
    // Random id sequences (ids that exist), decoded both ways.
    const size = tok.getVocabSize(true);
    let maxId = 0;
    for (const id of Object.values(tok.getVocab(true))) maxId = Math.max(maxId, id);
    const randoms = [];
    for (let k = 0; k < 60; k++) {
      const ids = [];
      const n = 1 + Math.floor(rnd() * 40);
      while (ids.length < n) {
        const id = Math.floor(rnd() * (maxId + 1));
        if (tok.idToToken(id) !== null) ids.push(id);
      }
      randoms.push({ ids, decode: await tok.decode(ids, false), decode_skip: await tok.decode(ids, true) });
    }
    const out = { name, tokenizer: path.resolve(file), vocab_size: size, cases, random_decodes: randoms };
    fs.writeFileSync(path.join(outDir, name + '.json'), JSON.stringify(out));
    console.error(`run_oracle: ${name}: ${cases.length} cases`);
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
