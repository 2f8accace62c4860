// Writes a loaded model back as a Hugging Face checkpoint folder: the weights in
// the checkpoint's original layout (the load plan reversed: fused tensors fused
// again, original names, dtypes, file order and shards, tensors the model did
// not use carried through), plus config.json, generation_config.json and the
// tokenizer files copied verbatim. For a model loaded without changes the
// safetensors bytes equal the original's.
#pragma once

#include <functional>
#include <string>

#include "loom/core/status.h"
#include "loom/models/model.h"

namespace loom::models {

struct SaveOptions {
  // Called once per file written or copied (name within out_dir), for progress.
  std::function<void(const std::string& file)> on_file;
};

// The side files save_pretrained copies when present.
const std::vector<std::string>& checkpoint_side_files();

// `out_dir` is created if needed; files of the same name are overwritten. It
// must not be the model's own directory (its safetensors are mapped).
Status save_pretrained(const Model& model, const std::string& out_dir, const SaveOptions& options = {});

}  // namespace loom::models
