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
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "loom_portable.h"

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

INSTANTIATE_TEST_SUITE_P(Fixtures, PortableRuntime, ::testing::Values("llama-f32", "qwen3-f32"),
                         [](const auto& info) { return info.param == "llama-f32" ? std::string("llama") : std::string("qwen3"); });

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
