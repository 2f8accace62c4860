#pragma once

namespace loom::batching {

// Seconds since the epoch (GenerationOutput's created_time, lifespan, timestamps).
double wall_seconds();

}  // namespace loom::batching
