// Placeholder until the block formats land (issue 19, quantized kernels helper).
#include "loom/core/dtype.h"
#include "loom/core/status.h"

namespace loom {

void convert_quantized(const void*, DType src_type, void*, DType dst_type, int64_t) {
  throw Error(unsupported(std::string("conversion ") + std::string(dtype_name(src_type)) + " → " +
                            std::string(dtype_name(dst_type))));
}

}  // namespace loom
