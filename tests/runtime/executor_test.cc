#include "loom/runtime/executor.h"

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <new>
#include <span>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "loom/core/file_pages.h"
#include "loom/graph/builder.h"
#include "runtime/cpu/qlinear.h"
#include "loom/runtime/shared_packs.h"

namespace loom::runtime {
namespace {

using graph::Dim;

// x → silu → add(x) → silu → mul(x) …: a chain whose intermediates die young.
std::shared_ptr<graph::Graph> chain_graph(int length) {
  auto g = std::make_shared<graph::Graph>();
  const int t = g->add_symbol("tokens");
  graph::ValueId x = g->add_input("x", DType::kF32, {Dim::sym(t), Dim::fixed(64)});
  graph::ValueId h = x;
  for (int i = 0; i < length; ++i) {
    h = g->add_node("silu", {h}, {}).at(0);
    h = g->add_node(i % 2 ? "mul" : "add", {h, x}, {}).at(0);
  }
  g->mark_output("y", h);
  return g;
}

float silu(float v) { return v / (1.0f + std::exp(-v)); }

TEST(Executor, RunsAChainAndReusesArenaBlocks) {
  auto g = chain_graph(20);
  for (const Backend* b : {&cpu_backend(), &reference_backend()}) {
    auto ex = Executor::create(g, *b).value();
    std::vector<float> xs(3 * 64);
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(static_cast<float>(i)) * 0.5f;
    std::vector<Tensor> out;
    ASSERT_TRUE(ex->run({{"x", Tensor::from_f32(xs, {3, 64})}}, nullptr, &out).ok());
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].shape(), (Shape{3, 64}));
    for (size_t i = 0; i < xs.size(); ++i) {
      float h = xs[i];
      for (int k = 0; k < 20; ++k) h = k % 2 ? silu(h) * xs[i] : silu(h) + xs[i];
      ASSERT_NEAR(out[0].data_as<float>()[i], h, 1e-5f) << b->name() << " element " << i;
    }
    // 40 intermediates of 768 bytes each, but at most a few are alive at once.
    EXPECT_LE(ex->arena_bytes(), 4u * 3 * 64 * 4) << b->name();
  }
}

TEST(Executor, InputErrorsAreNamed) {
  auto ex = Executor::create(chain_graph(1), cpu_backend()).value();
  std::vector<Tensor> out;
  Status missing = ex->run({}, nullptr, &out);
  EXPECT_NE(missing.message().find("'x'"), std::string::npos) << missing.message();
  Status dtype = ex->run({{"x", Tensor::zeros(DType::kI32, {2, 64})}}, nullptr, &out);
  EXPECT_NE(dtype.message().find("F32"), std::string::npos) << dtype.message();
  Status shape = ex->run({{"x", Tensor::zeros(DType::kF32, {2, 63})}}, nullptr, &out);
  EXPECT_NE(shape.message().find("64"), std::string::npos) << shape.message();
}

TEST(Executor, AttentionWithoutKvStoreIsAnError) {
  auto g = std::make_shared<graph::Graph>();
  graph::ValueId q = g->add_input("q", DType::kF32, {Dim::fixed(2), Dim::fixed(8)});
  graph::ValueId y = g->add_node("attention", {q, q, q},
                                 {{"layer", int64_t{0}}, {"num_q_heads", int64_t{2}}, {"num_kv_heads", int64_t{2}},
                                  {"head_dim", int64_t{4}}, {"scale", 0.5}}).at(0);
  g->mark_output("y", y);
  auto ex = Executor::create(g, cpu_backend()).value();
  std::vector<Tensor> out;
  Status s = ex->run({{"q", Tensor::zeros(DType::kF32, {2, 8})}}, nullptr, &out);
  EXPECT_EQ(s.code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("KV store"), std::string::npos) << s.message();
}

// A table mapped from a file, as a checkpoint's tensors are.
struct MappedTensor {
  void* map = nullptr;
  size_t bytes = 0;
  Tensor tensor;
  explicit MappedTensor(const Tensor& t) : bytes(t.nbytes()) {
    char path[] = "/tmp/loom_tied_XXXXXX";
    const int fd = mkstemp(path);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(write(fd, t.data(), bytes), static_cast<ssize_t>(bytes));
    map = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    unlink(path);
    EXPECT_NE(map, MAP_FAILED);
    register_file_mapping(map, bytes);
    tensor = Tensor::wrap(map, t.dtype(), t.shape());
  }
  ~MappedTensor() {
    tensor = Tensor();
    unregister_file_mapping(map);
    munmap(map, bytes);
  }
  // Pages of the mapping in this process's page table (/proc/self/pagemap bit 63).
  int64_t resident_pages() const {
    const long page = sysconf(_SC_PAGESIZE);
    FILE* f = std::fopen("/proc/self/pagemap", "rb");
    if (!f) return -1;
    int64_t present = 0;
    const uintptr_t first = reinterpret_cast<uintptr_t>(map) / static_cast<uintptr_t>(page);
    const uintptr_t count = (bytes + static_cast<size_t>(page) - 1) / static_cast<size_t>(page);
    for (uintptr_t i = 0; i < count; ++i) {
      uint64_t entry = 0;
      if (std::fseek(f, static_cast<long>((first + i) * 8), SEEK_SET) != 0 || std::fread(&entry, 8, 1, f) != 1) {
        present = -1;
        break;
      }
      present += static_cast<int64_t>(entry >> 63);
    }
    std::fclose(f);
    return present;
  }
};

// A tied LM head and token embedding: the linear packs the table into its own
// layout and releases the file pages; the embedding then reads its rows from that
// copy (exactly the table's values) instead of faulting the pages back in.
TEST(Executor, TiedEmbeddingReadsItsRowsFromTheLinearsPackedCopy) {
  const int64_t vocab = 4096, hidden = 256;
  std::vector<float> values(static_cast<size_t>(vocab * hidden));
  for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(static_cast<float>(i) * 0.37f);
  for (DType dt : {DType::kBF16, DType::kQ8_0, DType::kQ6_K}) {
    MappedTensor table(Tensor::from_f32(values, {vocab, hidden}).to(dt));
    auto g = std::make_shared<graph::Graph>();
    const int t = g->add_symbol("tokens");
    const graph::ValueId ids = g->add_input("ids", DType::kI32, {Dim::sym(t)});
    const graph::ValueId w = g->add_parameter("embed_tokens.weight", table.tensor);
    const graph::ValueId h = g->add_node("embedding", {w, ids}, {}).at(0);
    g->mark_output("h", h);
    g->mark_output("logits", g->add_node("linear", {h, w}, {}).at(0));
    auto ex = Executor::create(g, cpu_backend()).value();
    std::vector<int32_t> id_values;
    for (int32_t i = 0; i < 64; ++i) id_values.push_back((i * 977 + 13) % static_cast<int32_t>(vocab));
    const Tensor id_tensor = Tensor::from_i32(id_values, {64});
    std::vector<Tensor> out;
    ASSERT_TRUE(ex->run({{"ids", id_tensor}}, nullptr, &out).ok());
    // Packed into panels (BF16) or groups (the quantized types where decode prefers them).
    const bool copied = dt == DType::kBF16 || cpu::detail::decode_prefers_interleaved(dt);
    if (copied) EXPECT_EQ(table.resident_pages(), 0) << dtype_name(dt);
    const std::vector<float> expected = table.tensor.to_f32_vector();
    for (size_t i = 0; i < id_values.size(); ++i) {
      ASSERT_EQ(std::memcmp(out[0].data_as<float>() + i * hidden, expected.data() + id_values[i] * hidden, hidden * 4), 0)
          << dtype_name(dt) << " row " << i;
    }
    // The same tensor packs once, whoever asks; another shape of it is another weight.
    const auto a = shared_packed_linear(table.tensor, nullptr).value();
    EXPECT_EQ(a.get(), shared_packed_linear(table.tensor, nullptr).value().get());
    EXPECT_NE(a.get(), shared_packed_linear(table.tensor.reshape({vocab / 2, 2 * hidden}), nullptr).value().get());
    // What `loom bench` reads as the decode read bound: every live copy's streamed bytes, once.
    const std::vector<cpu::ByteRange> live = live_packed_weights();
    const auto held = std::count_if(live.begin(), live.end(), [&](const cpu::ByteRange& r) {
      return r.data == a->streamed_weights() && r.bytes == a->streamed_weight_bytes();
    });
    EXPECT_EQ(held, 1) << dtype_name(dt);
    EXPECT_GE(a->streamed_weight_bytes(), static_cast<size_t>(table.tensor.nbytes())) << dtype_name(dt);
    // And the reference backend, which reads the table as stored, agrees.
    auto ref = Executor::create(g, reference_backend()).value();
    std::vector<Tensor> ref_out;
    ASSERT_TRUE(ref->run({{"ids", id_tensor}}, nullptr, &ref_out).ok());
    EXPECT_EQ(std::memcmp(ref_out[0].data(), out[0].data(), out[0].nbytes()), 0) << dtype_name(dt);
  }
}

std::vector<float> chain_reference(const std::vector<float>& xs, int length) {
  std::vector<float> out(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    float h = xs[i];
    for (int k = 0; k < length; ++k) h = k % 2 ? silu(h) * xs[i] : silu(h) + xs[i];
    out[i] = h;
  }
  return out;
}

// A shape is planned once: running it again reuses the plan (the same arena
// places), another shape gets its own, and each output has its exact shape.
TEST(Executor, PlansEachShapeOnceAndReusesIt) {
  auto ex = Executor::create(chain_graph(6), cpu_backend()).value();
  const float* first_place = nullptr;
  for (int64_t tokens : {5, 3, 5, 3, 3}) {
    std::vector<float> xs(static_cast<size_t>(tokens) * 64);
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::cos(static_cast<float>(i + tokens)) * 0.5f;
    std::vector<Tensor> out;
    ASSERT_TRUE(ex->run({{"x", Tensor::from_f32(xs, {tokens, 64})}}, nullptr, &out).ok());
    ASSERT_EQ(out[0].shape(), (Shape{tokens, 64}));
    const std::vector<float> want = chain_reference(xs, 6);
    for (size_t i = 0; i < xs.size(); ++i) ASSERT_NEAR(out[0].data_as<float>()[i], want[i], 1e-5f) << tokens << " " << i;
    if (tokens == 3) {
      if (!first_place) first_place = out[0].data_as<float>();
      EXPECT_EQ(out[0].data_as<float>(), first_place);
    }
  }
  EXPECT_EQ(ex->cached_plans(), 2u);
}

TEST(Executor, InputsByPositionEqualInputsByName) {
  auto ex = Executor::create(chain_graph(4), cpu_backend()).value();
  ASSERT_EQ(ex->input_index("x").value(), 0u);
  EXPECT_EQ(ex->input_index("y").status().code(), ErrorCode::kNotFound);
  std::vector<float> xs(2 * 64);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(static_cast<float>(3 * i)) * 0.5f;
  const Tensor x = Tensor::from_f32(xs, {2, 64});
  const Tensor* bound[] = {&x};
  ASSERT_TRUE(ex->run(std::span<const Tensor* const>(bound), nullptr).ok());
  const std::vector<float> by_position = ex->output(0).to_f32_vector();
  std::vector<Tensor> out;
  ASSERT_TRUE(ex->run({{"x", x}}, nullptr, &out).ok());
  EXPECT_EQ(out[0].to_f32_vector(), by_position);
  const std::vector<float> want = chain_reference(xs, 4);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(by_position[i], want[i], 1e-5f) << i;
  const Tensor* none[] = {nullptr};
  Status missing = ex->run(std::span<const Tensor* const>(none), nullptr);
  EXPECT_NE(missing.message().find("'x'"), std::string::npos) << missing.message();
  EXPECT_FALSE(ex->output(0).defined());
}

// A kernel's exception, thrown on the calling thread or on a pool worker, comes
// back as an error naming the op; the executor and the pool go on working.
TEST(Executor, AKernelsExceptionIsAnErrorNamingTheOp) {
  ThreadPool pool(2, /*back_off=*/false);
  auto g = chain_graph(1);
  for (int thrower : {0, 1}) {
    Backend b("throwing");
    b.add("add", *cpu_backend().find("add"));
    b.add("mul", *cpu_backend().find("mul"));
    b.add("silu", OpKernel{nullptr, [thrower](KernelArgs& a) -> Status {
                             a.pool.parallel_for(2, [&](int64_t begin, int64_t, int) {
                               if (begin == thrower) throw std::bad_alloc();
                             });
                             return Status::Ok();
                           }});
    auto ex = Executor::create(g, b, &pool).value();
    std::vector<Tensor> out;
    for (int round = 0; round < 3; ++round) {
      Status st = ex->run({{"x", Tensor::zeros(DType::kF32, {2, 64})}}, nullptr, &out);
      EXPECT_EQ(st.code(), ErrorCode::kResourceExhausted) << st.to_string();
      EXPECT_NE(st.message().find("silu"), std::string::npos) << st.message();
    }
  }
  std::atomic<int64_t> covered{0};
  pool.parallel_for(100, [&](int64_t b, int64_t e, int) { covered.fetch_add(e - b); });
  EXPECT_EQ(covered.load(), 100);
}

}  // namespace
}  // namespace loom::runtime
