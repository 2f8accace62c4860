// Greedy tokens from llama.cpp (node-llama-cpp's prebuilt CPU build) for a GGUF file:
//   node llama_cpp_greedy.mjs MODEL.gguf 1,2,3 N   ->  [id, ...] (N new tokens)
// The prompt is given as ids so tokenizers play no part; sampling is greedy
// (temperature 0), no BOS is added. node-llama-cpp is looked up in
// $LOOM_LLAMA_CPP_NPM (default: the repository's .cache/npm-llama, where
// scripts/install-test-oracles puts it).
import {createRequire} from "node:module";
import path from "node:path";
import {fileURLToPath, pathToFileURL} from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const npmDir = process.env.LOOM_LLAMA_CPP_NPM || path.join(here, "..", "..", ".cache", "npm-llama");
const entry = createRequire(path.join(npmDir, "package.json")).resolve("node-llama-cpp");
const {getLlama} = await import(pathToFileURL(entry).href);

const [modelPath, ids, count] = process.argv.slice(2);
if (!modelPath || !ids || !count) {
  console.error("usage: node llama_cpp_greedy.mjs MODEL.gguf ID,ID,... NEW_TOKENS");
  process.exit(2);
}
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});
const context = await model.createContext({contextSize: 512, batchSize: 512, threads: 2});
const sequence = context.getSequence();
const out = [];
for await (const token of sequence.evaluate(ids.split(",").map(Number), {temperature: 0})) {
  out.push(token);
  if (out.length >= Number(count)) break;
}
console.log(JSON.stringify(out));
await context.dispose();
await model.dispose();
await llama.dispose();
