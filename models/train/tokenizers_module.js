'use strict';
// Finds the `tokenizers` npm package (Hugging Face's Node binding).
// scripts/train-default-model installs it into <repo>/.cache/npm-train; set
// LOOM_TOKENIZERS_NODE_DIR to a node_modules/tokenizers directory to override.
const path = require('path');

function loadTokenizers() {
  const candidates = [];
  if (process.env.LOOM_TOKENIZERS_NODE_DIR) candidates.push(process.env.LOOM_TOKENIZERS_NODE_DIR);
  candidates.push(path.resolve(__dirname, '../../.cache/npm-train/node_modules/tokenizers'));
  candidates.push('tokenizers');
  const errors = [];
  for (const c of candidates) {
    try {
      return require(c);
    } catch (e) {
      errors.push(`${c}: ${e.message.split('\n')[0]}`);
    }
  }
  throw new Error('cannot load the `tokenizers` npm package (run scripts/train-default-model, which installs '
    + 'tokenizers@0.23.2 into .cache/npm-train):\n  ' + errors.join('\n  '));
}

module.exports = { loadTokenizers };
