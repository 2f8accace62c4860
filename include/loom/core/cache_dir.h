// The directory loom keeps files it makes from a checkpoint in, so that later loads
// map them instead of making them again: weights quantized or converted at load
// (weights/weights_cache.h) and weights packed into the kernels' layouts
// (runtime/packed_weights_cache.h). `loom cache` lists and clears it.
#pragma once

#include <string>

namespace loom {

// LOOM_CACHE_DIR, else $XDG_CACHE_HOME/loom, else $HOME/.cache/loom; "" when
// LOOM_CACHE_DIR is "off" (or there is no home): then nothing is cached.
std::string cache_dir();

}  // namespace loom
