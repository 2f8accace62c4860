// Greedy tokens from llama.cpp for several GGUF files in one process (the library loads
// once): node llama_cpp_greedy_many.mjs N FILE:1,2,3 FILE:4,5 ...  ->  one JSON line
// {"FILE:1,2,3": {"tokens": [id, ...], "top": [[[id, p], [id, p], [id, p]], ...]}, ...}: N
// new tokens each, and at each step llama.cpp's three most probable tokens with their
// probabilities. As llama_cpp_greedy.mjs: prompt as ids, no BOS added, greedy.
import {createRequire} from "node:module";
import path from "node:path";
import {fileURLToPath, pathToFileURL} from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const npmDir = process.env.LOOM_LLAMA_CPP_NPM || path.join(here, "..", "..", ".cache", "npm-llama");
const entry = createRequire(path.join(npmDir, "package.json")).resolve("node-llama-cpp");
const {getLlama} = await import(pathToFileURL(entry).href);

const [count, ...runs] = process.argv.slice(2);
if (!count || runs.length === 0) {
  console.error("usage: node llama_cpp_greedy_many.mjs NEW_TOKENS MODEL.gguf:ID,ID,... ...");
  process.exit(2);
}
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const results = {};
for (const run of runs) {
  const at = run.lastIndexOf(":");
  const model = await llama.loadModel({modelPath: run.slice(0, at)});
  const context = await model.createContext({contextSize: 512, batchSize: 512, threads: 2});
  const tokens = [], top = [];
  const ids = run.slice(at + 1).split(",").map(Number);
  for await (const step of context.getSequence().evaluateWithMetadata(ids, {probabilities: true}, {temperature: 0})) {
    tokens.push(step.token);
    top.push([...step.probabilities.entries()].slice(0, 3));
    if (tokens.length >= Number(count)) break;
  }
  results[run] = {tokens, top};
  await context.dispose();
  await model.dispose();
}
console.log(JSON.stringify(results));
await llama.dispose();
