// Runs an ONNX decoder exported by loom with onnxruntime-node for
// tests/export/onnx_exporter_test.cc. Reads a JSON request from argv[2], writes
// a JSON answer to argv[3]. Requests:
//   {"model": path, "op": "steps", "steps": [{input_ids: [[...]], attention_mask: [[...]],
//     position_ids: [[...]], feed_past: bool}]}  → {"steps": [{logits: [...flat], dims: [B,S,V]}]}
//     (feed_past: use the previous step's present.* as past_key_values; else an empty past;
//      a step's own "model" runs it in that file instead — a static decode file after a static prefill one)
//     → also {"signature": {name: [dims (numbers or dim names)]}} of every input and output of "model"
//   {"model": path, "op": "greedy", "prompt": [...], "new_tokens": n}  → {"tokens": [...]}
//     (batch 1: prefill, then one token per step with the model's own KV cache)
// Inputs are validated against the model's declared names; any ORT error exits non-zero.
'use strict';
const fs = require('fs');
const ort = require('onnxruntime-node');

function i64(rows) {
  const b = rows.length, s = rows[0].length;
  return new ort.Tensor('int64', BigInt64Array.from(rows.flat().map(BigInt)), [b, s]);
}

async function main() {
  const req = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  // ORT's default graph optimizations (fusions included), as a consumer runs the file.
  const sessions = {};
  const open = async (path) => (sessions[path] = sessions[path] || await ort.InferenceSession.create(path));
  let session = await open(req.model);
  const layers = session.inputNames.filter((n) => /^past_key_values\.\d+\.key$/.test(n)).length;
  const kvShape = (name) => {
    const meta = session.inputMetadata || [];
    const m = Array.isArray(meta) ? meta.find((x) => x.name === name) : null;
    if (!m || !m.shape) throw new Error('no shape metadata for ' + name);
    return [m.shape[1], m.shape[3]];  // kv heads, head dim (fixed numbers)
  };
  const signature = (s) => {
    const out = {};
    for (const m of [...(s.inputMetadata || []), ...(s.outputMetadata || [])])
      if (m.shape) out[m.name] = m.shape.map((d) => (typeof d === 'bigint' ? Number(d) : d));
    return out;
  };
  async function step(ids, mask, pos, past) {
    const b = ids.length;
    const feeds = { input_ids: i64(ids), attention_mask: i64(mask), position_ids: i64(pos) };
    for (let i = 0; i < layers; ++i) {
      for (const kind of ['key', 'value']) {
        const name = `past_key_values.${i}.${kind}`;
        if (past) feeds[name] = past[`present.${i}.${kind}`];
        else {
          const [h, d] = kvShape(name);
          feeds[name] = new ort.Tensor('float32', new Float32Array(0), [b, h, 0, d]);
        }
      }
    }
    return session.run(feeds);
  }
  let answer;
  if (req.op === 'steps') {
    const out = [];
    let past = null;
    for (const s of req.steps) {
      session = await open(s.model || req.model);
      const r = await step(s.input_ids, s.attention_mask, s.position_ids, s.feed_past ? past : null);
      past = r;
      out.push({ logits: Array.from(r.logits.data), dims: r.logits.dims.map(Number),
                 present0: r['present.0.key'].dims.map(Number) });
    }
    answer = { steps: out, signature: signature(await open(req.model)) };
  } else if (req.op === 'greedy') {
    const tokens = [];
    let ids = [req.prompt], past = null, len = 0;
    const argmaxLast = (r) => {
      const [, s, v] = r.logits.dims.map(Number);
      const d = r.logits.data;
      let best = 0;
      for (let j = 1; j < v; ++j) if (d[(s - 1) * v + j] > d[(s - 1) * v + best]) best = j;
      return best;
    };
    for (let t = 0; t < req.new_tokens; ++t) {
      const s = ids[0].length;
      const pos = [Array.from({ length: s }, (_, i) => len + i)];
      const mask = [Array.from({ length: len + s }, () => 1)];
      past = await step(ids, mask, pos, past);
      len += s;
      const next = argmaxLast(past);
      tokens.push(next);
      ids = [[next]];
    }
    answer = { tokens };
  } else {
    throw new Error('unknown op ' + req.op);
  }
  fs.writeFileSync(process.argv[3], JSON.stringify(answer));
}

main().catch((e) => { console.error('run_onnx.js: ' + (e && e.stack || e)); process.exit(1); });
