// loom_portable on its own: this program links loom_portable and GoogleTest
// only (a test below checks its symbols). It runs the programs that
// loom_export_tests exported into <build>/portable_programs (run `ctest -R
// "export|portable"`, which orders them): loom's greedy tokens, agreement of
// the two backends, chunking, and clear errors for bad files and bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "loom_portable.h"
#include "loom_program_generated.h"  // the schema's builder: hand-made programs below
#include "lpte_weights_file.h"

namespace {

namespace fs = std::filesystem;

fs::path programs() { return fs::path(LOOM_BINARY_DIR) / "portable_programs"; }

struct Program {
  lp_program* p = nullptr;
  explicit Program(const fs::path& file) : p(lp_program_load(file.string().c_str())) {}
  ~Program() { lp_free(p); }
};

fs::path program_file(const std::string& fixture, const std::string& backend) {
  const fs::path f = programs() / (fixture + "-" + backend + ".lpte");
  if (!fs::exists(f)) ADD_FAILURE() << f << " is missing: loom_export_tests writes it (ctest -R \"export|portable\")";
  return f;
}

std::vector<int32_t> read_line(std::istream& in) {
  std::string line;
  std::getline(in, line);
  std::istringstream s(line);
  std::vector<int32_t> v;
  for (int32_t t; s >> t;) v.push_back(t);
  return v;
}

int32_t argmax(const std::vector<float>& v) { return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin()); }

class PortableRuntime : public ::testing::TestWithParam<std::string> {};

// The program's own greedy continuation equals loom's (written by the exporter test).
TEST_P(PortableRuntime, GreedyTokensEqualLooms) {
  for (const std::string backend : {"reference", "cpu_simd"}) {
    SCOPED_TRACE(backend);
    std::ifstream expected(programs() / (GetParam() + ".greedy"));
    ASSERT_TRUE(expected.good()) << "loom's greedy tokens are missing: run loom_export_tests first";
    const std::vector<int32_t> prompt = read_line(expected), loom_tokens = read_line(expected);
    ASSERT_FALSE(prompt.empty());
    ASSERT_EQ(loom_tokens.size(), 16u);
    Program prog(program_file(GetParam(), backend));
    ASSERT_NE(prog.p, nullptr) << lp_last_error();
    EXPECT_GT(lp_program_size(prog.p), 0u);
    EXPECT_GT(lp_program_arena_bytes(prog.p), 0u);
    EXPECT_LT(lp_program_arena_bytes(prog.p), lp_program_unplanned_bytes(prog.p));
    EXPECT_GT(lp_program_state_bytes(prog.p), 0u);
    std::vector<float> logits(static_cast<size_t>(lp_program_vocab_size(prog.p)));
    ASSERT_EQ(lp_run(prog.p, prompt.data(), static_cast<int64_t>(prompt.size()), 0, logits.data()), 0) << lp_error(prog.p);
    std::vector<int32_t> tokens;
    for (size_t i = 0; i < loom_tokens.size(); ++i) {
      tokens.push_back(argmax(logits));
      ASSERT_EQ(lp_run(prog.p, &tokens.back(), 1, static_cast<int64_t>(prompt.size() + i), logits.data()), 0) << lp_error(prog.p);
    }
    EXPECT_EQ(tokens, loom_tokens);
    std::printf("[ portable ] %s %s: program %zu bytes, arena %zu bytes (%zu without reuse), KV state %zu bytes\n",
                GetParam().c_str(), backend.c_str(), lp_program_size(prog.p), lp_program_arena_bytes(prog.p),
                lp_program_unplanned_bytes(prog.p), lp_program_state_bytes(prog.p));
  }
}

// reference (double sums) and cpu_simd (f32 vector loops) agree to f32 rounding;
// a prompt run whole, token by token, or through lp_run_all gives the same
// last-token logits.
TEST_P(PortableRuntime, BackendsAndChunkingsAgree) {
  Program ref(program_file(GetParam(), "reference")), simd(program_file(GetParam(), "cpu_simd"));
  ASSERT_NE(ref.p, nullptr) << lp_last_error();
  ASSERT_NE(simd.p, nullptr) << lp_last_error();
  const int64_t V = lp_program_vocab_size(ref.p);
  const std::vector<int32_t> prompt = {5, 17, 3, 99 % static_cast<int32_t>(V), 42 % static_cast<int32_t>(V), 7, 8, 1, 30};
  const int64_t n = static_cast<int64_t>(prompt.size());
  ASSERT_GT(n, lp_program_max_tokens(ref.p)) << "the prompt must span several chunks";
  std::vector<float> a(static_cast<size_t>(V)), b(static_cast<size_t>(V)), one(static_cast<size_t>(V)), all(static_cast<size_t>(n * V));
  ASSERT_EQ(lp_run(ref.p, prompt.data(), n, 0, a.data()), 0) << lp_error(ref.p);
  ASSERT_EQ(lp_run(simd.p, prompt.data(), n, 0, b.data()), 0) << lp_error(simd.p);
  double d = 0;
  for (int64_t i = 0; i < V; ++i) d = std::max(d, std::fabs(static_cast<double>(a[static_cast<size_t>(i)]) - b[static_cast<size_t>(i)]));
  EXPECT_LE(d, 1e-4) << "reference vs cpu_simd";
  EXPECT_GT(d, 0.0) << "the two backends should round differently (are both running the same kernels?)";
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(lp_run(ref.p, &prompt[static_cast<size_t>(i)], 1, i, one.data()), 0) << lp_error(ref.p);
  EXPECT_EQ(one, a) << "token by token vs chunks of max_tokens";
  ASSERT_EQ(lp_run_all(ref.p, prompt.data(), n, 0, all.data()), 0) << lp_error(ref.p);
  EXPECT_EQ(std::vector<float>(all.end() - V, all.end()), a) << "lp_run_all's last row";
}

// llama and qwen3, and the routed experts of mixtral and qwen2_moe (the moe op).
INSTANTIATE_TEST_SUITE_P(Fixtures, PortableRuntime, ::testing::Values("llama-f32", "qwen3-f32", "mixtral-f32", "qwen2_moe-f32"),
                         [](const auto& info) {
                           std::string name = info.param.substr(0, info.param.find('-'));
                           name.erase(std::remove(name.begin(), name.end(), '_'), name.end());
                           return name;
                         });

// examples/portable_generate.c prints the same greedy tokens as loom.
TEST(PortableExample, GeneratesLoomsGreedyTokens) {
  const fs::path exe = fs::path(LOOM_BINARY_DIR) / "src" / "portable" / "loom_portable_generate";
  ASSERT_TRUE(fs::exists(exe)) << exe << " is not built";
  std::ifstream expected(programs() / "llama-f32.greedy");
  ASSERT_TRUE(expected.good()) << "loom's greedy tokens are missing: run loom_export_tests first";
  const std::vector<int32_t> prompt = read_line(expected), loom_tokens = read_line(expected);
  std::string cmd = "'" + exe.string() + "' '" + program_file("llama-f32", "cpu_simd").string() + "' " +
                    std::to_string(loom_tokens.size());
  for (int32_t t : prompt) cmd += " " + std::to_string(t);
  FILE* out = ::popen((cmd + " 2>/dev/null").c_str(), "r");
  ASSERT_NE(out, nullptr);
  std::string text;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, out)) text += buf;
  EXPECT_EQ(::pclose(out), 0) << cmd;
  std::istringstream s(text);
  EXPECT_EQ(read_line(s), loom_tokens) << text;
}

TEST(PortableRuntimeErrors, BadFilesAreRefusedWithTheReason) {
  EXPECT_EQ(lp_program_load("/nonexistent/model.lpte"), nullptr);
  EXPECT_NE(std::string(lp_last_error()).find("/nonexistent/model.lpte"), std::string::npos) << lp_last_error();
  const fs::path src = program_file("llama-f32", "reference");
  std::ifstream in(src, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 64u);
  const fs::path bad = fs::temp_directory_path() / ("lp_bad_" + std::to_string(::getpid()) + ".lpte");
  std::string wrong_id = bytes;
  wrong_id[4] = 'X';  // the file identifier sits at bytes 4..7
  std::ofstream(bad, std::ios::binary) << wrong_id;
  EXPECT_EQ(lp_program_load(bad.string().c_str()), nullptr);
  EXPECT_NE(std::string(lp_last_error()).find("not a loom portable program"), std::string::npos) << lp_last_error();
  std::ofstream(bad, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
  EXPECT_EQ(lp_program_load(bad.string().c_str()), nullptr);
  EXPECT_NE(std::string(lp_last_error()).find("corrupt"), std::string::npos) << lp_last_error();
  fs::remove(bad);
}

TEST(PortableRuntimeErrors, BadInputIsAnErrorNotACrash) {
  Program prog(program_file("llama-f32", "reference"));
  ASSERT_NE(prog.p, nullptr) << lp_last_error();
  const int64_t V = lp_program_vocab_size(prog.p), P = lp_program_max_positions(prog.p);
  std::vector<float> logits(static_cast<size_t>(V));
  const int32_t bad_id = static_cast<int32_t>(V), ok = 1;
  EXPECT_EQ(lp_run(prog.p, &bad_id, 1, 0, logits.data()), -1);
  EXPECT_NE(std::string(lp_error(prog.p)).find("token id " + std::to_string(V)), std::string::npos) << lp_error(prog.p);
  EXPECT_EQ(lp_run(prog.p, &ok, 1, P, logits.data()), -1);
  EXPECT_NE(std::string(lp_error(prog.p)).find("positions"), std::string::npos) << lp_error(prog.p);
  EXPECT_EQ(lp_run(prog.p, &ok, 0, 0, logits.data()), -1);
  EXPECT_EQ(lp_run(prog.p, nullptr, 1, 0, logits.data()), -1);
  EXPECT_EQ(lp_run(nullptr, &ok, 1, 0, logits.data()), -1);
  EXPECT_EQ(lp_run(prog.p, &ok, 1, 0, logits.data()), 0) << lp_error(prog.p);
  EXPECT_STREQ(lp_error(prog.p), "");
}

std::string read_file(const fs::path& f) {
  std::ifstream in(f, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_file(const fs::path& f, const std::string& bytes) { std::ofstream(f, std::ios::binary | std::ios::trunc) << bytes; }

fs::path scratch(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("lp_test_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// The exporter test writes llama-f32-cpu_simd.lpte with every weight in its
// sidecar; a copy damaged in each way is refused at load with the reason (or,
// for flipped payload bytes, by lp_program_verify_weights), never a crash.
TEST(PortableRuntimeErrors, DamagedWeightsFilesAreRefusedWithTheReason) {
  const fs::path src = program_file("llama-f32", "cpu_simd");
  ASSERT_TRUE(fs::exists(src.string() + ".weights")) << "the cpu_simd program should have a weights file";
  const std::string program = read_file(src), weights = read_file(src.string() + ".weights");
  ASSERT_GT(weights.size(), lpte::kWeightsHeaderBytes + 64);
  const fs::path dir = scratch("weights");
  // the program names its sidecar by its exported name: keep that name
  const fs::path named = dir / src.filename();
  write_file(named, program);
  auto load_error = [&](const std::string& side_bytes) {
    write_file(named.string() + ".weights", side_bytes);
    lp_program* p = lp_program_load(named.string().c_str());
    const std::string e = p ? "" : lp_last_error();
    lp_free(p);
    return e;
  };
  EXPECT_EQ(load_error(weights), "");  // the intact copy loads
  {
    fs::remove(named.string() + ".weights");
    EXPECT_EQ(lp_program_load(named.string().c_str()), nullptr);
    EXPECT_NE(std::string(lp_last_error()).find("cannot open weights file"), std::string::npos) << lp_last_error();
  }
  std::string e = load_error(weights.substr(0, weights.size() - 100));
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  e = load_error(weights.substr(0, 10));
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  std::string bad = weights;
  bad[0] = 'X';
  e = load_error(bad);
  EXPECT_NE(e.find("bad magic"), std::string::npos) << e;
  bad = weights;
  bad[24] ^= 1;  // the header's payload hash: a weights file of another export
  e = load_error(bad);
  EXPECT_NE(e.find("another export"), std::string::npos) << e;
  bad = weights;
  bad[8] = 0;  // payload offset 0
  e = load_error(bad);
  EXPECT_NE(e.find("header's payload"), std::string::npos) << e;
  // Flipped payload bytes load (the hash is not recomputed at load: that reads
  // every page) and are caught by lp_program_verify_weights.
  bad = weights;
  bad[lpte::kWeightsHeaderBytes + 17] ^= 0x40;
  write_file(named.string() + ".weights", bad);
  lp_program* p = lp_program_load(named.string().c_str());
  ASSERT_NE(p, nullptr) << lp_last_error();
  EXPECT_EQ(lp_program_verify_weights(p), -1);
  EXPECT_NE(std::string(lp_error(p)).find("damaged"), std::string::npos) << lp_error(p);
  lp_free(p);
  write_file(named.string() + ".weights", weights);
  p = lp_program_load(named.string().c_str());
  ASSERT_NE(p, nullptr) << lp_last_error();
  EXPECT_EQ(lp_program_verify_weights(p), 0) << lp_error(p);
  lp_free(p);
  fs::remove_all(dir);
}

namespace fb = loom::portable::fb;

// A hand-made program: logits = rows of a [4, 4] weight picked by the token id
// (embedding, then gather_rows), the weight in a sidecar at `offset` with
// `bytes` bytes recorded; the sidecar holds `payload` (its header written here).
std::string tiny_program(const fs::path& dir, uint64_t offset, uint64_t bytes, const std::vector<float>& payload) {
  lpte::WeightsHeader h{};
  std::memcpy(h.magic, lpte::kWeightsMagic, 8);
  h.payload_offset = lpte::kWeightsHeaderBytes;
  h.payload_bytes = payload.size() * 4;
  lpte::PayloadHash hash;
  hash.update(payload.data(), payload.size() * 4);
  h.payload_hash = hash.digest();
  std::string side(reinterpret_cast<const char*>(&h), sizeof h);
  side.append(reinterpret_cast<const char*>(payload.data()), payload.size() * 4);
  write_file(dir / "tiny.lpte.weights", side);

  flatbuffers::FlatBufferBuilder b;
  const int64_t V = 4;
  auto T = [&](const char* name, fb::TensorKind k, fb::ElemType t, fb::RowKind r, int64_t rows, int64_t cols, uint64_t off,
               int w) { return fb::CreateTensor(b, b.CreateString(name), k, t, r, rows, cols, off, w); };
  std::vector<flatbuffers::Offset<fb::Tensor>> tensors = {
      T("w", fb::TensorKind_Weight, fb::ElemType_F32, fb::RowKind_Fixed, V, V, 0, 0),
      T("input_ids", fb::TensorKind_Arena, fb::ElemType_I32, fb::RowKind_Tokens, 0, 1, 0, -1),
      T("positions", fb::TensorKind_Arena, fb::ElemType_I32, fb::RowKind_Tokens, 0, 1, 64, -1),
      T("logits_indices", fb::TensorKind_Arena, fb::ElemType_I32, fb::RowKind_Selected, 0, 1, 128, -1),
      T("x", fb::TensorKind_Arena, fb::ElemType_F32, fb::RowKind_Tokens, 0, V, 192, -1),
      T("logits", fb::TensorKind_Arena, fb::ElemType_F32, fb::RowKind_Selected, 0, V, 256, -1)};
  std::vector<flatbuffers::Offset<fb::WeightData>> weights = {
      fb::CreateWeightData(b, b.CreateString("w"), 0, offset, bytes, fb::ElemType_F32)};
  std::vector<flatbuffers::Offset<fb::Op>> ops = {
      fb::CreateOp(b, fb::OpCode_Embedding, b.CreateVector(std::vector<int>{0, 1}), b.CreateVector(std::vector<int>{4})),
      fb::CreateOp(b, fb::OpCode_GatherRows, b.CreateVector(std::vector<int>{4, 3}), b.CreateVector(std::vector<int>{5}))};
  std::vector<flatbuffers::Offset<fb::Binding>> inputs = {fb::CreateBinding(b, b.CreateString("input_ids"), 1),
                                                          fb::CreateBinding(b, b.CreateString("positions"), 2),
                                                          fb::CreateBinding(b, b.CreateString("logits_indices"), 3)};
  std::vector<flatbuffers::Offset<fb::Binding>> outputs = {fb::CreateBinding(b, b.CreateString("logits"), 5)};
  const auto wf = fb::CreateWeightsFile(b, b.CreateString("tiny.lpte.weights"), side.size(), h.payload_hash);
  const auto root = fb::CreateProgram(b, 2, b.CreateString("reference"), b.CreateString("tiny"), V, 2, 8, 320, 320, 0,
                                      b.CreateVector(tensors), b.CreateVector(weights), b.CreateVector(ops),
                                      b.CreateVector(std::vector<flatbuffers::Offset<fb::KvLayer>>{}), b.CreateVector(inputs),
                                      b.CreateVector(outputs), 0, wf, false);
  fb::FinishProgramBuffer(b, root);
  const fs::path f = dir / "tiny.lpte";
  write_file(f, std::string(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize()));
  return f.string();
}

// The weights are read in place from the sidecar at the recorded offset; a
// range outside the file, or a misaligned or mis-sized one, is refused at load.
TEST(PortableRuntimeErrors, ExternalWeightRangesAreCheckedAgainstTheFile) {
  const fs::path dir = scratch("tiny");
  std::vector<float> payload(32);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<float>(i);
  {  // the weight is the second half of the payload: floats 16..31
    const std::string f = tiny_program(dir, 64, 64, payload);
    Program prog{fs::path(f)};
    ASSERT_NE(prog.p, nullptr) << lp_last_error();
    EXPECT_EQ(lp_program_weights_file_size(prog.p), lpte::kWeightsHeaderBytes + 128);
    std::vector<float> logits(4);
    const int32_t id = 2;
    ASSERT_EQ(lp_run(prog.p, &id, 1, 0, logits.data()), 0) << lp_error(prog.p);
    EXPECT_EQ(logits, (std::vector<float>{24, 25, 26, 27}));
    EXPECT_EQ(lp_program_verify_weights(prog.p), 0);
  }
  auto refused = [&](uint64_t offset, uint64_t bytes, const std::string& why) {
    const std::string f = tiny_program(dir, offset, bytes, payload);
    EXPECT_EQ(lp_program_load(f.c_str()), nullptr);
    EXPECT_NE(std::string(lp_last_error()).find(why), std::string::npos) << lp_last_error();
  };
  refused(96, 64, "outside the weights file");         // runs past the end
  refused(uint64_t{1} << 62, 64, "outside the weights file");  // no overflow
  refused(64, uint64_t(-64), "outside the weights file");
  refused(2, 64, "not 4-byte aligned");
  refused(0, 32, "does not match its shape");          // 8 floats for a 4×4 weight
  fs::remove_all(dir);
}

// A hand-made moe program: logits = moe(embedding(id)) with 2 experts, H = 2,
// I = 1; its knobs damage one thing at a time.
struct MoeKnobs {
  std::string backend = "reference";
  int64_t down_rows = 4;  // E·H
  int top_k = 1;
  bool shared_without_gate = false;
};

std::string moe_program(const fs::path& dir, const MoeKnobs& k) {
  flatbuffers::FlatBufferBuilder b;
  auto T = [&](const char* name, fb::TensorKind kind, fb::ElemType t, fb::RowKind r, int64_t rows, int64_t cols, uint64_t off,
               int w) { return fb::CreateTensor(b, b.CreateString(name), kind, t, r, rows, cols, off, w); };
  const auto W = fb::TensorKind_Weight, A = fb::TensorKind_Arena;
  const auto F = fb::ElemType_F32, I = fb::ElemType_I32;
  std::vector<flatbuffers::Offset<fb::Tensor>> tensors = {
      T("emb", W, F, fb::RowKind_Fixed, 2, 2, 0, 0),
      T("input_ids", A, I, fb::RowKind_Tokens, 0, 1, 0, -1),
      T("positions", A, I, fb::RowKind_Tokens, 0, 1, 64, -1),
      T("logits_indices", A, I, fb::RowKind_Selected, 0, 1, 128, -1),
      T("x", A, F, fb::RowKind_Tokens, 0, 2, 192, -1),
      T("router", W, F, fb::RowKind_Fixed, 2, 2, 0, 1),
      T("gate_up", W, F, fb::RowKind_Fixed, 4, 2, 0, 2),
      T("down", W, F, fb::RowKind_Fixed, k.down_rows, 1, 0, 3),
      T("y", A, F, fb::RowKind_Tokens, 0, 2, 256, -1),
      T("logits", A, F, fb::RowKind_Selected, 0, 2, 320, -1)};
  // expert 0: gate [1, 0], up [1, 0], down [3; 4]; expert 1: zeros. x = [1, 0]
  // routes to expert 0 (logits 2 > 1).
  const std::vector<std::vector<float>> data = {
      {1, 0, 0, 1}, {2, 0, 1, 0}, {1, 0, 1, 0, 0, 0, 0, 0}, std::vector<float>(static_cast<size_t>(k.down_rows), 0.0f)};
  std::vector<float> down = data[3];
  if (down.size() >= 2) down[0] = 3, down[1] = 4;
  std::vector<flatbuffers::Offset<fb::WeightData>> weights;
  const char* names[] = {"emb", "router", "gate_up", "down"};
  for (size_t i = 0; i < 4; ++i) weights.push_back(fb::CreateWeightData(b, b.CreateString(names[i]), b.CreateVector(i == 3 ? down : data[i])));
  std::vector<int> moe_in = {4, 5, 6, 7};
  if (k.shared_without_gate) moe_in.insert(moe_in.end(), {4, -1});
  std::vector<flatbuffers::Offset<fb::Op>> ops = {
      fb::CreateOp(b, fb::OpCode_Embedding, b.CreateVector(std::vector<int>{0, 1}), b.CreateVector(std::vector<int>{4})),
      fb::CreateOp(b, fb::OpCode_Moe, b.CreateVector(moe_in), b.CreateVector(std::vector<int>{8}), b.CreateString("moe"), 0, 0, 0,
                   0, 0, 0, 0, 0, 0, 0, 0, 0, 0, false, 0, 0, k.top_k, true, fb::Activation_Silu),
      fb::CreateOp(b, fb::OpCode_GatherRows, b.CreateVector(std::vector<int>{8, 3}), b.CreateVector(std::vector<int>{9}))};
  std::vector<flatbuffers::Offset<fb::Binding>> inputs = {fb::CreateBinding(b, b.CreateString("input_ids"), 1),
                                                          fb::CreateBinding(b, b.CreateString("positions"), 2),
                                                          fb::CreateBinding(b, b.CreateString("logits_indices"), 3)};
  std::vector<flatbuffers::Offset<fb::Binding>> outputs = {fb::CreateBinding(b, b.CreateString("logits"), 9)};
  const auto root = fb::CreateProgram(b, 2, b.CreateString(k.backend), b.CreateString("tiny_moe"), 2, 2, 8, 384, 384, 0,
                                      b.CreateVector(tensors), b.CreateVector(weights), b.CreateVector(ops),
                                      b.CreateVector(std::vector<flatbuffers::Offset<fb::KvLayer>>{}), b.CreateVector(inputs),
                                      b.CreateVector(outputs), 0, 0, false);
  fb::FinishProgramBuffer(b, root);
  const fs::path f = dir / "moe.lpte";
  write_file(f, std::string(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize()));
  return f.string();
}

// The moe op runs on both backends (silu(1) · [3, 4] for token 0, which routes
// to expert 0); shapes and attributes that do not fit are refused at load.
TEST(PortableRuntimeErrors, MoeRunsAndItsShapesAreCheckedAtLoad) {
  const fs::path dir = scratch("moe");
  const double silu1 = 1 / (1 + std::exp(-1.0));
  for (const std::string backend : {"reference", "cpu_simd"}) {
    MoeKnobs k;
    k.backend = backend;
    Program prog{fs::path(moe_program(dir, k))};
    ASSERT_NE(prog.p, nullptr) << lp_last_error();
    std::vector<float> logits(2);
    const int32_t id = 0;
    ASSERT_EQ(lp_run(prog.p, &id, 1, 0, logits.data()), 0) << lp_error(prog.p);
    EXPECT_NEAR(logits[0], 3 * silu1, 1e-6) << backend;
    EXPECT_NEAR(logits[1], 4 * silu1, 1e-6) << backend;
  }
  auto refused = [&](const MoeKnobs& k, const std::string& why) {
    const std::string f = moe_program(dir, k);
    EXPECT_EQ(lp_program_load(f.c_str()), nullptr);
    EXPECT_NE(std::string(lp_last_error()).find(why), std::string::npos) << lp_last_error();
  };
  MoeKnobs bad;
  bad.down_rows = 3;
  refused(bad, "down must be [E·H, I]");
  bad = {};
  bad.top_k = 3;
  refused(bad, "top_k 3 outside [1, 2]");
  bad.top_k = 0;
  refused(bad, "top_k 0 outside [1, 2]");
  bad = {};
  bad.shared_without_gate = true;
  refused(bad, "shared and shared_gate come together");
  fs::remove_all(dir);
}

// This binary holds loom_portable but nothing of loom's engine (namespace loom::,
// apart from the schema's generated loom::portable::fb reader).
TEST(PortableRuntimeLinks, NothingOfLoom) {
  // (the path itself: in the shell popen starts, /proc/self would be nm)
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  FILE* nm = ::popen(("nm -C --defined-only '" + self + "' 2>&1").c_str(), "r");
  ASSERT_NE(nm, nullptr);
  char buf[4096];
  int symbols = 0, ours = 0;
  std::vector<std::string> foreign;
  while (std::fgets(buf, sizeof buf, nm)) {
    const std::string line(buf);
    ++symbols;
    if (line.find("lp_program_load") != std::string::npos) ++ours;
    const size_t at = line.find("loom::");
    if (at != std::string::npos && line.compare(at, 20, "loom::portable::fb::") != 0 && foreign.size() < 5) foreign.push_back(line);
  }
  ::pclose(nm);
  ASSERT_GT(ours, 0) << "nm did not list this binary's symbols (" << symbols << " lines)";
  EXPECT_TRUE(foreign.empty()) << "loom symbols linked in, e.g. " << foreign.front();
}

}  // namespace
