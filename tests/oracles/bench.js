// Encode throughput of the `tokenizers` library (Node binding, Rust core) on the parity
// corpus: encodeBatch over all texts, repeated for SECONDS. Thread count comes from
// RAYON_NUM_THREADS. Prints "name<TAB>wall MB/s<TAB>MB per CPU-second" lines (CPU time of
// the whole process, which is steadier than wall time on a shared machine).
// Usage: RAYON_NUM_THREADS=N node bench.js CORPUS_JSON SECONDS name=tokenizer.json ...
'use strict';
const fs = require('fs');
const { Tokenizer } = require('tokenizers');

async function main() {
  const [corpusPath, secondsArg, ...specs] = process.argv.slice(2);
  const texts = JSON.parse(fs.readFileSync(corpusPath, 'utf8')).map((c) => c.text);
  const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t, 'utf8'), 0);
  const seconds = Number(secondsArg);
  for (const spec of specs) {
    const eq = spec.indexOf('=');
    const tok = Tokenizer.fromFile(spec.slice(eq + 1));
    await tok.encodeBatch(texts, { addSpecialTokens: true });  // warm-up
    let done = 0;
    const c0 = process.cpuUsage();
    const t0 = process.hrtime.bigint();
    let t1 = t0;
    while (Number(t1 - t0) / 1e9 < seconds) {
      await tok.encodeBatch(texts, { addSpecialTokens: true });
      done += bytes;
      t1 = process.hrtime.bigint();
    }
    const c = process.cpuUsage(c0);
    const cpu = (c.user + c.system) / 1e6;
    console.log(`${spec.slice(0, eq)}\t${(done / (Number(t1 - t0) / 1e9) / 1e6).toFixed(2)}\t${(done / cpu / 1e6).toFixed(2)}`);
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
