// The `loom` command as a user runs it: JSON output scripts rely on, streamed
// output, and one-line errors with exit code 2 instead of crashes.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <utility>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include "loom/io/gguf_writer.h"

namespace {

namespace fs = std::filesystem;

struct CommandResult {
  int exit_code;
  std::string out;  // stdout and stderr together
};

// env: assignments put before the command ("LOOM_CACHE_DIR=/tmp/x ").
CommandResult loom(const std::string& args, const std::string& env = "") {
  const std::string cmd = env + std::string(LOOM_BINARY_DIR) + "/loom " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed"};
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string fixture(const std::string& name) {
  const char* env = std::getenv("LOOM_FIXTURES_DIR");
  return ((env ? fs::path(env) : fs::path(LOOM_BINARY_DIR) / "fixtures") / name).string();
}

nlohmann::json reference(const std::string& name) {
  std::ifstream in(fs::path(fixture(name)) / "reference.json");
  return nlohmann::json::parse(in);
}

std::string join(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

TEST(Cli, GenerateJsonMatchesPyTorchGreedy) {
  for (const char* variant : {"llama-f32", "mistral_sliding-f32"}) {
    const auto ref = reference(variant);
    const auto prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
    CommandResult r = loom("generate --model " + fixture(variant) + " --prompt-ids " + join(prompt) +
                 " --max-new-tokens 32 --greedy --json");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["prompt_ids"].get<std::vector<int32_t>>(), prompt);
    EXPECT_EQ(j["generated_ids"].get<std::vector<int32_t>>(), ref["greedy_ids_cached"].get<std::vector<int32_t>>()) << variant;
    EXPECT_EQ(j["finish_reason"], "length");
    EXPECT_EQ(j["logprobs"].size(), 32u);
    EXPECT_GT(j["timings"]["decode_tokens_per_second"].get<double>(), 0.0);
  }
}

TEST(Cli, SampledOutputIsReproducibleAcrossThreadCounts) {
  const std::string base = "generate --model " + fixture("qwen2-f32") +
                           " --prompt-ids 3,1,4,1,5 -n 24 --temperature 1.2 --top-k 30 --seed 11 --json";
  CommandResult a = loom(base + " --threads 1"), b = loom(base + " --threads 2"), c = loom(base + " --threads 2");
  ASSERT_EQ(a.exit_code, 0) << a.out;
  const auto ids = nlohmann::json::parse(a.out)["generated_ids"];
  EXPECT_EQ(ids, nlohmann::json::parse(b.out)["generated_ids"]);
  EXPECT_EQ(ids, nlohmann::json::parse(c.out)["generated_ids"]);
}

TEST(Cli, StreamsIdsWithoutTokenizer) {
  CommandResult r = loom("generate --model " + fixture("llama-f32") + " --prompt-ids 1,2,3 -n 5 --greedy");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  int count = 0;
  std::istringstream in(r.out);
  int id;
  while (in >> id) ++count;
  EXPECT_EQ(count, 5) << r.out;
}

TEST(Cli, BadInputGivesOneLineErrorAndExitCode2) {
  struct Case {
    std::string args, expect;
  };
  const std::vector<Case> cases = {
      {"generate --model /nonexistent/dir --prompt-ids 1", "does not exist"},
      {"generate --model " + fixture("llama-f32") + " --prompt-ids 1,999999", "outside the vocabulary"},
      {"generate --model " + fixture("llama-f32") + " --prompt-ids 1,x2", "'x2'"},
      {"generate --model " + fixture("llama-f32") + " --prompt hello", "tokenizer.json"},
      {"generate --model " + fixture("llama-f32") + " --prompt-ids 1 --top-p 0", "top_p"},
      {"generate --model " + fixture("llama-f32"), "--prompt"},
      {"inspect /nonexistent/dir", "does not exist"},
  };
  for (const auto& c : cases) {
    CommandResult r = loom(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("terminate called"), std::string::npos) << r.out;
  }
}

TEST(Cli, InspectDescribesTheCheckpoint) {
  CommandResult r = loom("inspect " + fixture("qwen2_sliding-bf16"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const char* s : {"Qwen2ForCausalLM", "BF16", "sliding_attention", "rope", "GQA"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
}

TEST(Cli, InspectGgufPrintsMetadataTensorsAndTotals) {
  const fs::path dir = fs::temp_directory_path() / ("loom-cli-gguf-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "tiny.gguf").string();
  std::vector<std::string> vocab;
  for (int i = 0; i < 100; ++i) vocab.push_back("tok" + std::to_string(i));
  using loom::io::GgufValue;
  const loom::io::GgufMetadata meta = {{"general.architecture", GgufValue::string("llama")},
                                       {"llama.block_count", GgufValue::u32(2)},
                                       {"tokenizer.ggml.tokens", GgufValue::strings(vocab)}};
  const loom::io::GgufTensors tensors = {
      {"token_embd.weight", loom::Tensor::zeros(loom::DType::kQ8_0, {4, 64})},
      {"blk.0.attn_norm.weight", loom::Tensor::zeros(loom::DType::kF32, {64})},
      {"blk.1.attn_norm.weight", loom::Tensor::zeros(loom::DType::kF32, {64})}};
  ASSERT_TRUE(loom::io::write_gguf(path, meta, tensors, 64).ok());

  CommandResult r = loom("inspect " + path);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const char* s : {"GGUF version 3, alignment 64", "general.architecture", "\"llama\"", "[string × 100]",
                        "\"tok0\"", "\"tok4\", …", "token_embd.weight", "Q8_0", "[4, 64]", "272",
                        "blk.1.attn_norm.weight", "[64]"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  EXPECT_EQ(r.out.find("tok5"), std::string::npos) << "long arrays are abbreviated\n" << r.out;
  // Totals per dtype: two F32 tensors of 64 elements (512 bytes), one Q8_0 of 256 (272 bytes).
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(F32 +2 tensors +128 elements +512 bytes)"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(Q8_0 +1 tensors +256 elements +272 bytes)"))) << r.out;

  // A damaged file is a one-line error naming the file and the problem, exit code 2.
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  bytes[4] = 9;  // version 9
  const std::string bad = (dir / "bad.gguf").string();
  std::ofstream(bad, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  CommandResult e = loom("inspect " + bad);
  EXPECT_EQ(e.exit_code, 2) << e.out;
  EXPECT_NE(e.out.find("bad.gguf: GGUF version 9 is not supported"), std::string::npos) << e.out;
  fs::remove_all(dir);
}

// `loom cache` lists the entries of both kinds loads leave in LOOM_CACHE_DIR (weights
// quantized with --quantize, weights packed into the kernels' layouts), and `clear
// --missing` removes only what no checkpoint can use any more.
TEST(Cli, CacheListsAndClearsEntriesOfBothKinds) {
  const fs::path dir = fs::temp_directory_path() / ("loom-cli-cache-" + std::to_string(getpid()));
  fs::remove_all(dir);
  const fs::path checkpoint = dir / "checkpoint";
  fs::create_directories(dir);
  fs::copy(std::string(LOOM_SOURCE_DIR) + "/models/loom-kjv-tiny", checkpoint, fs::copy_options::recursive);
  const std::string env = "LOOM_CACHE_DIR=" + (dir / "cache").string() + " ";
  auto run = [&](const std::string& args) { return loom(args, env); };
  CommandResult empty = run("cache");
  ASSERT_EQ(empty.exit_code, 0) << empty.out;
  EXPECT_NE(empty.out.find("no cached weights"), std::string::npos) << empty.out;

  // Its f32 matrices are packed (from the checkpoint's file), and quantized to q8_0.
  ASSERT_EQ(run("generate -m " + checkpoint.string() + " --prompt-ids 1,2,3 -n 2").exit_code, 0);
  ASSERT_EQ(run("generate -m " + checkpoint.string() + " --prompt-ids 1,2,3 -n 2 --quantize q8_0").exit_code, 0);
  CommandResult listed = run("cache list");
  ASSERT_EQ(listed.exit_code, 0) << listed.out;
  for (const char* s : {"| weights-", "| weights |", "quantized to q8_0", "| packed-", "| packed |",
                        "packed into the kernels' layouts", "| last use |"})
    EXPECT_NE(listed.out.find(s), std::string::npos) << s << "\n" << listed.out;
  EXPECT_NE(listed.out.find(checkpoint.string()), std::string::npos) << listed.out;
  EXPECT_NE(listed.out.find((checkpoint / "model.safetensors").string()), std::string::npos) << listed.out;

  CommandResult kept = run("cache clear --missing");
  EXPECT_NE(kept.out.find("removed 0 entries"), std::string::npos) << kept.out;
  fs::rename(checkpoint, dir / "moved");
  EXPECT_NE(run("cache").out.find("its source is gone"), std::string::npos);
  CommandResult cleared = run("cache clear --missing");
  EXPECT_EQ(cleared.out.find("removed 0 entries"), std::string::npos) << cleared.out;
  EXPECT_NE(run("cache").out.find("no cached weights"), std::string::npos)
      << "packings of the weights entry went with it";

  // One eviction rule for both kinds: under a budget that holds one load's entries,
  // the next load's evict the least recently used, packed or not.
  fs::rename(dir / "moved", checkpoint);
  ASSERT_EQ(run("generate -m " + checkpoint.string() + " --prompt-ids 1,2,3 -n 2 --quantize q8_0").exit_code, 0);
  const std::string quantized_first = run("cache").out;
  EXPECT_NE(quantized_first.find("| weights |"), std::string::npos) << quantized_first;
  // 5 MB: the q4_0 weights (2.2 MB) fit once every entry of the q8_0 load (7.6 MB, and
  // the 20 MB packing of the checkpoint's file) is gone; then the packing of the new
  // weights cannot grow, and is done in memory.
  CommandResult limited = loom("generate -m " + checkpoint.string() + " --prompt-ids 1,2,3 -n 2 --quantize q4_0",
                               env + "LOOM_CACHE_MAX_GB=0.005 LOOM_LOG_LEVEL=info ");
  ASSERT_EQ(limited.exit_code, 0) << limited.out;
  const std::string after = run("cache").out;
  EXPECT_EQ(after.find("quantized to q8_0"), std::string::npos) << after;
  EXPECT_NE(after.find("quantized to q4_0"), std::string::npos) << after;
  EXPECT_NE(limited.out.find("the least recently used"), std::string::npos) << limited.out;
  fs::remove_all(dir);
}

TEST(Cli, BenchPrintsATable) {
  CommandResult r = loom("bench --model " + fixture("llama-f32") + " --prompt-tokens 32 --decode-tokens 8");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("prefill tok/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| LlamaForCausalLM |"), std::string::npos) << r.out;
  // The matmul column: auto by default, LOOM_MATMUL_PRECISION or the flag otherwise.
  EXPECT_NE(r.out.find("| auto"), std::string::npos) << r.out;
  setenv("LOOM_MATMUL_PRECISION", "highest", 1);
  r = loom("bench --model " + fixture("llama-f32") + " --prompt-tokens 8 --decode-tokens 2 --no-bounds");
  EXPECT_NE(r.out.find("| highest |"), std::string::npos) << r.out;
  setenv("LOOM_MATMUL_PRECISION", "fastest", 1);
  r = loom("bench --model " + fixture("llama-f32") + " --prompt-tokens 8 --decode-tokens 2 --no-bounds --matmul-precision high");
  unsetenv("LOOM_MATMUL_PRECISION");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("LOOM_MATMUL_PRECISION: matmul precision must be highest, high, medium or auto, got \"fastest\""),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("| high |"), std::string::npos) << r.out;
}

// --depth fills the cache before the measured runs (as llama-bench -d), and the table says the
// depth, the KV type and its bytes per token (llama-f32: 2 layers, 2 kv heads of 16: f32
// 2·2·2·16·4 = 512 B; q8_0 one padded block of 34 B per head vector: 272 B).
TEST(Cli, BenchAtDepthPrintsKvBytesPerToken) {
  CommandResult r = loom("bench --model " + fixture("llama-f32") +
                         " --prompt-tokens 16 --decode-tokens 4 --depth 100 --no-bounds");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("prefill tok/s (16 @ d100)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| float32 | 512 |"), std::string::npos) << r.out;
  r = loom("bench --model " + fixture("llama-f32") +
           " --prompt-tokens 16 --decode-tokens 4 --depth 40 --no-bounds --kv-cache-dtype q8_0");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("| q8_0 | 272 |"), std::string::npos) << r.out;
  r = loom("bench --model " + fixture("llama-f32") + " --prompt-tokens 8 --decode-tokens 2 --no-bounds --cache-type-v q4_1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("--cache-type-v"), std::string::npos) << r.out;
}

// The switches that compare code paths are bench flags (no environment variables).
TEST(Cli, BenchTakesTheQuantizedPathSwitches) {
  CommandResult r = loom("bench --model " + fixture("llama-f32") +
                         " --quantize q8_0 --quant-layout interleaved --quant-gemm rows --keep-mapped-pages"
                         " --prompt-tokens 8 --decode-tokens 2 --no-bounds");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("decode tok/s"), std::string::npos) << r.out;
  r = loom("bench --model " + fixture("llama-f32") + " --quant-gemm gpu --prompt-tokens 8 --decode-tokens 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("--quant-gemm"), std::string::npos) << r.out;
}

TEST(Cli, BenchProfileSaysWhereEachPhaseSpendsItsTime) {
  CommandResult r = loom("bench --model " + fixture("llama-f32") + " --prompt-tokens 32 --decode-tokens 4 --no-bounds --profile");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const size_t prefill = r.out.find("Prefill of 32 tokens, time per op:");
  const size_t decode = r.out.find("Decode of 4 tokens, time per op:");
  ASSERT_NE(prefill, std::string::npos) << r.out;
  ASSERT_NE(decode, std::string::npos) << r.out;
  EXPECT_LT(prefill, decode);
  // Layer indices folded into '*'; decode rows are single tokens, each layer's matmul called once per token.
  EXPECT_NE(r.out.find("| linear | model.layers.*.mlp.down_proj | 2-64 | "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| attention | model.layers.*.self_attn | 1 | "), std::string::npos) << r.out;
  // Only the measured run: the warm-up's decode step is not counted.
  EXPECT_NE(r.out.find("| linear | lm_head | 1 | 4 | "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| total |"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("model.layers.0."), std::string::npos) << r.out;
}

// `loom batch`: one output line per input (per sequence with
// num_return_sequences), in input order, greedy lines equal to `loom generate`,
// a bad line failing alone.
TEST(Cli, BatchWritesOneLinePerSequenceInInputOrder) {
  const fs::path dir = fs::temp_directory_path() / ("loom_cli_batch_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream in(dir / "in.jsonl");
    in << R"({"id": "g", "prompt_ids": [5, 6, 7], "max_new_tokens": 6})" << "\n"
       << R"({"id": "bad", "prompt": 3})" << "\n"
       << R"({"id": "s", "prompt_ids": [9, 10], "max_new_tokens": 5, "temperature": 0.8, "seed": 4, "num_return_sequences": 3})"
       << "\n";
  }
  const std::string model = fixture("llama-f32");
  CommandResult r = loom("batch --model " + model + " --input " + (dir / "in.jsonl").string() + " --output " +
                         (dir / "out.jsonl").string() + " --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("3 requests (4 finished, 1 failed)"), std::string::npos) << r.out;
  std::ifstream out(dir / "out.jsonl");
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(out, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 5u);
  CommandResult g = loom("generate --model " + model + " --prompt-ids 5,6,7 --max-new-tokens 6 --json");
  ASSERT_EQ(g.exit_code, 0) << g.out;
  EXPECT_EQ(lines[0]["generated_ids"], nlohmann::json::parse(g.out)["generated_ids"]);
  EXPECT_EQ(lines[1]["id"], "bad");
  EXPECT_EQ(lines[1]["status"], "FAILED");
  EXPECT_NE(lines[1]["error"].get<std::string>().find("'prompt' must be a string"), std::string::npos);
  for (int k = 0; k < 3; ++k) {
    const nlohmann::json& l = lines[static_cast<size_t>(2 + k)];
    EXPECT_EQ(l["id"], "s");
    EXPECT_EQ(l["sequence_index"], k);
    EXPECT_EQ(l["status"], "FINISHED") << l.dump();
    EXPECT_EQ(l["generated_ids"].size(), 5u);
  }
  fs::remove_all(dir);
}

}  // namespace

// `loom convert`: the written checkpoint is byte-identical, a non-empty --out is
// refused without --force, and the model's own folder is refused even with it.
namespace {
TEST(Cli, ConvertWritesTheSameCheckpointAndGuardsItsOutput) {
  auto bytes = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const fs::path out = fs::temp_directory_path() / ("loom_cli_convert_" + std::to_string(::getpid()));
  fs::remove_all(out);
  for (const char* variant : {"llama-f32", "qwen2-bf16"}) {
    CommandResult r = loom("convert --model " + fixture(variant) + " --out " + out.string() + " --force");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("model.safetensors"), std::string::npos) << "progress names the files: " << r.out;
    EXPECT_TRUE(bytes(out / "model.safetensors") == bytes(fs::path(fixture(variant)) / "model.safetensors")) << variant;
    EXPECT_EQ(bytes(out / "config.json"), bytes(fs::path(fixture(variant)) / "config.json")) << variant;
  }
  CommandResult refused = loom("convert --model " + fixture("llama-f32") + " --out " + out.string());
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_NE(refused.out.find("--force"), std::string::npos) << refused.out;
  CommandResult self = loom("convert --model " + fixture("llama-f32") + " --out " + fixture("llama-f32") + " --force");
  EXPECT_EQ(self.exit_code, 2) << self.out;
  EXPECT_NE(self.out.find("model directory itself"), std::string::npos) << self.out;
  CommandResult missing = loom("convert --model /nonexistent/loom_model --out " + (out / "x").string());
  EXPECT_EQ(missing.exit_code, 2) << missing.out;
  EXPECT_NE(missing.out.find("/nonexistent/loom_model"), std::string::npos) << missing.out;
  CommandResult help = loom("convert --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--out"), std::string::npos) << help.out;
  fs::remove_all(out);
}
// `loom export`: a program directory a user can load, the stages' summary on
// stderr, an ONNX file, a portable program, and clear errors for an unknown
// backend or format.
TEST(Cli, ExportWritesAProgramAndReportsItsStages) {
  const fs::path dir = fs::temp_directory_path() / ("loom_cli_export_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  CommandResult r = loom("export --model " + fixture("llama-f32") + " --out " + (dir / "p").string() + " --dynamic");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("patches applied: 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokens∈[1,256]"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir / "p" / "program.json"));
  EXPECT_TRUE(fs::exists(dir / "p" / "weights.safetensors"));
  r = loom("export --model " + fixture("llama-f32") + " --out " + (dir / "q").string() + " --seq-len 8 --batch-size 2");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("static 2×8"), std::string::npos) << r.out;
  r = loom("export --model " + fixture("llama-f32") + " --out " + (dir / "o.onnx").string() + " --format onnx");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(fs::exists(dir / "o.onnx"));
  r = loom("export --model " + fixture("llama-f32") + " --out " + (dir / "m.lpte").string() +
           " --format portable --backend cpu_simd --max-tokens 8");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(fs::exists(dir / "m.lpte"));
  EXPECT_NE(r.out.find("memory plan: arena"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("backend cpu_simd, at most 8 tokens per chunk"), std::string::npos) << r.out;
  r = loom("export --model " + fixture("llama-f32") + " --out " + (dir / "s.lpte").string() + " --format portable --seq-len 4");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("static, 4 tokens per chunk"), std::string::npos) << r.out;
  r = loom("export --model " + fixture("llama-f32") + " --out " + (dir / "n.lpte").string() +
           " --format portable --backend no_such_backend");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("no_such_backend"), std::string::npos) << r.out;
  r = loom("export --model " + fixture("llama-f32") + " --out " + (dir / "x").string() + " --format tflite");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--format tflite"), std::string::npos) << r.out;
  fs::remove_all(dir);
}

// `loom kernels --explain`: per module, the kernel a KernelConfig picks and
// why; a bad config is a one-line error naming the key.
TEST(Cli, KernelsExplainsTheChoicePerModule) {
  const fs::path dir = fs::temp_directory_path() / ("loom_cli_kernels_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "ok.json")
      << R"({"RMSNorm": "loom:FusedRMSNorm", "fusions": [[[["RMSNorm", "model.layers.1.post_attention_layernorm"], ["MLP", "model.layers.1.mlp"]], "loom:RMSNormMLP"]]})";
  std::ofstream(dir / "bad.json") << R"({"NoSuchLayer": "loom:FusedRMSNorm"})";
  const std::string model = fixture("llama-f32");
  CommandResult r = loom("kernels --model " + model + " --kernel-config " + (dir / "ok.json").string() + " --explain");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("model.layers.0.post_attention_layernorm [LlamaRMSNorm, RMSNorm] -> loom:FusedRMSNorm"),
            std::string::npos) << r.out;  // layer 0 is not in the fusion pattern
  EXPECT_NE(r.out.find("model.layers.1.post_attention_layernorm [LlamaRMSNorm, RMSNorm] -> fused loom:RMSNormMLP"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model.layers.1.mlp [LlamaMLP, MLP] -> identity"), std::string::npos) << r.out;
  r = loom("kernels --model " + model + " --kernel-config " + (dir / "bad.json").string() + " --explain");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("NoSuchLayer"), std::string::npos) << r.out;
  fs::remove_all(dir);
}

// Without --kernel-config every command loads loom's built-in fusions (and
// `kernels --explain` shows them); --no-builtin-fusions runs the checkpoint's
// modules; both give the same tokens.
TEST(Cli, BuiltinFusionsAreOnByDefaultAndGiveTheUnfusedTokens) {
  const std::string model = fixture("llama-f32");
  CommandResult r = loom("kernels --model " + model + " --explain");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("loom's built-in fusions"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model.layers.0.self_attn [LlamaAttention, Attention] -> loom:FusedQKV"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model.layers.0.mlp [LlamaMLP, MLP] -> loom:FusedGateUpMLP"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model.layers.1.post_attention_layernorm [LlamaRMSNorm, RMSNorm] -> fused loom:AddRMSNorm"),
            std::string::npos) << r.out;
  const std::string base = "generate --model " + model + " --prompt-ids 5,6,7,8 --max-new-tokens 12 --json";
  CommandResult fused = loom(base);
  ASSERT_EQ(fused.exit_code, 0) << fused.out;
  CommandResult plain = loom(base + " --no-builtin-fusions");
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  const nlohmann::json a = nlohmann::json::parse(plain.out), b = nlohmann::json::parse(fused.out);
  EXPECT_FALSE(a["generated_ids"].empty());
  EXPECT_EQ(a["generated_ids"], b["generated_ids"]);
}

// --kernel-config on a model-loading command: the fused kernels give the same
// greedy continuation as the plain model; a bad config fails naming the key.
TEST(Cli, GenerateWithAKernelConfigGivesTheSameTokens) {
  const fs::path dir = fs::temp_directory_path() / ("loom_cli_kernel_config_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "k.json")
      << R"({"Attention": "loom:FusedQKV", "fusions": [[[["RMSNorm", "model.layers.*.post_attention_layernorm"], ["MLP", "model.layers.*.mlp"]], "loom:RMSNormMLP"]]})";
  std::ofstream(dir / "bad.json") << R"({"NoSuchLayer": "loom:FusedRMSNorm"})";
  const std::string base = "generate --model " + fixture("llama-f32") + " --prompt-ids 5,6,7,8 --max-new-tokens 12 --json";
  CommandResult plain = loom(base);
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  CommandResult fused = loom(base + " --kernel-config " + (dir / "k.json").string());
  ASSERT_EQ(fused.exit_code, 0) << fused.out;
  const nlohmann::json a = nlohmann::json::parse(plain.out), b = nlohmann::json::parse(fused.out);
  EXPECT_FALSE(a["generated_ids"].empty());
  EXPECT_EQ(a["generated_ids"], b["generated_ids"]);
  CommandResult bad = loom(base + " --kernel-config " + (dir / "bad.json").string());
  EXPECT_NE(bad.exit_code, 0) << bad.out;
  EXPECT_NE(bad.out.find("NoSuchLayer"), std::string::npos) << bad.out;
  fs::remove_all(dir);
}

// Runs `loom batch` over the prompts (the first is the one compared) and `loom generate`
// on the first, both with `flags`; returns the two generated_ids.
std::pair<nlohmann::json, nlohmann::json> batch_and_generate(const std::string& model,
                                                             const std::vector<std::vector<int32_t>>& prompts,
                                                             int max_new, const std::string& flags) {
  const fs::path dir = fs::temp_directory_path() / ("loom_cli_bg_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream in(dir / "in.jsonl");
    for (size_t i = 0; i < prompts.size(); ++i)
      in << nlohmann::json{{"id", std::to_string(i)}, {"prompt_ids", prompts[i]}, {"max_new_tokens", max_new}}.dump()
         << "\n";
  }
  CommandResult b = loom("batch --model " + model + " --input " + (dir / "in.jsonl").string() + " --output " +
                         (dir / "out.jsonl").string() + " --no-progress --page-size 16 " + flags);
  EXPECT_EQ(b.exit_code, 0) << b.out;
  std::ifstream out(dir / "out.jsonl");
  std::string line;
  EXPECT_TRUE(std::getline(out, line));
  const auto batched = line.empty() ? nlohmann::json() : nlohmann::json::parse(line)["generated_ids"];
  CommandResult g = loom("generate --model " + model + " --prompt-ids " + join(prompts[0]) + " --max-new-tokens " +
                         std::to_string(max_new) + " --greedy --json " + flags);
  EXPECT_EQ(g.exit_code, 0) << g.out;
  fs::remove_all(dir);
  // generate --json prints one line; notes on stderr come before it.
  const std::string last = g.out.substr(g.out.rfind('\n', g.out.size() - 2) == std::string::npos
                                            ? 0
                                            : g.out.rfind('\n', g.out.size() - 2) + 1);
  return {batched, g.exit_code == 0 ? nlohmann::json::parse(last)["generated_ids"] : nlohmann::json()};
}

// --kv-cache-dtype bfloat16 on both front ends: the contiguous cache of `generate` and the
// paged cache of `batch` round K/V the same way and give the same tokens; an unknown dtype is
// refused by name.
TEST(Cli, Bf16KvCacheGivesTheSameTokensInGenerateAndBatch) {
  const auto prompt = reference("llama-f32")["prompt_ids"].get<std::vector<int32_t>>();
  const std::string model = fixture("llama-f32");
  const auto [batched, generated] = batch_and_generate(model, {prompt}, 24, "--kv-cache-dtype bfloat16");
  EXPECT_EQ(generated, batched);
  EXPECT_EQ(batched.size(), 24u);
  CommandResult bad = loom("generate --model " + model + " --prompt-ids 1,2 --kv-cache-dtype float8");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.out.find("float8"), std::string::npos) << bad.out;
  CommandResult bad_k = loom("generate --model " + model + " --prompt-ids 1,2 --cache-type-k q5_7");
  EXPECT_NE(bad_k.exit_code, 0);
  EXPECT_NE(bad_k.out.find("--cache-type-k"), std::string::npos) << bad_k.out;
}

// Quantized K/V through both front ends: q8_0 K with f16 V, and q4_0 (rotated by default), give
// the same tokens from `generate` (contiguous cache) and `batch` (paged cache).
TEST(Cli, QuantizedKvCacheGivesTheSameTokensInGenerateAndBatch) {
  const auto prompt = reference("llama-f32")["prompt_ids"].get<std::vector<int32_t>>();
  const std::string model = fixture("llama-f32");
  for (const char* flags : {"--cache-type-k q8_0 --cache-type-v f16", "--kv-cache-dtype q4_0",
                            "--cache-type-k q4_0 --cache-type-v q8_0 --kv-cache-rotation off"}) {
    const auto [batched, generated] = batch_and_generate(model, {prompt}, 16, flags);
    EXPECT_EQ(generated, batched) << flags;
    EXPECT_EQ(batched.size(), 16u) << flags;
  }
}

// --matmul-precision medium on a bf16 checkpoint: generate and batch (with a second,
// shorter request in the batch) agree with each other, and with the f32 PyTorch reference
// on the first greedy token; a bad value names the flag and the choices.
TEST(Cli, MediumMatmulPrecisionAgreesBetweenGenerateAndBatch) {
  const auto ref = reference("llama-bf16");
  const auto prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
  const std::string model = fixture("llama-bf16");
  const std::vector<int32_t> shorter(prompt.begin(), prompt.begin() + 9);
  const auto [batched, generated] = batch_and_generate(model, {prompt, shorter}, 16, "--matmul-precision medium");
  EXPECT_EQ(generated, batched);
  ASSERT_EQ(batched.size(), 16u);
  EXPECT_EQ(batched[0].get<int32_t>(), ref["greedy_ids_cached"][0].get<int32_t>());
  // On a code path without bf16 dot products, medium says it computes as highest.
  setenv("LOOM_FORCE_ISA", "avx2", 1);
  CommandResult fallback = loom("generate --model " + model + " --prompt-ids 1,2 -n 1 --greedy --matmul-precision medium");
  unsetenv("LOOM_FORCE_ISA");
  EXPECT_EQ(fallback.exit_code, 0) << fallback.out;
  EXPECT_NE(fallback.out.find("compute as with highest"), std::string::npos) << fallback.out;
  CommandResult bad = loom("generate --model " + model + " --prompt-ids 1,2 --matmul-precision low");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.out.find("--matmul-precision"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("medium"), std::string::npos) << bad.out;
}

}  // namespace

namespace {
// The bundled model as a user would take it to llama.cpp and back: converted to one
// GGUF file (tokenizer and chat template inside), then generated from, chatted
// with and served like the folder, with the same greedy text.
TEST(Cli, GgufFileRunsLikeTheCheckpointFolder) {
  const fs::path out = fs::temp_directory_path() / ("loom_cli_gguf_" + std::to_string(::getpid()) + ".gguf");
  CommandResult r = loom("convert --to gguf --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("100%"), std::string::npos) << "progress is reported: " << r.out;
  // A second write refuses to overwrite without --force.
  r = loom("convert --to gguf --out " + out.string());
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--force"), std::string::npos) << r.out;

  const std::string args = " --prompt 'In the beginning' --max-new-tokens 24 --greedy --json";
  const CommandResult folder = loom("generate" + args), file = loom("generate --model " + out.string() + args);
  ASSERT_EQ(folder.exit_code, 0) << folder.out;
  ASSERT_EQ(file.exit_code, 0) << file.out;
  const auto jf = nlohmann::json::parse(folder.out.substr(folder.out.find('{')));
  const auto jg = nlohmann::json::parse(file.out.substr(file.out.find('{')));
  EXPECT_EQ(jg["generated_ids"], jf["generated_ids"]);
  EXPECT_EQ(jg["text"], jf["text"]);

  r = loom("inspect " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("tokenizer.ggml.model"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("blk.0.attn_q.weight"), std::string::npos) << r.out;

  // Not a GGUF file, and a quantization type loom does not make: named errors.
  const fs::path junk = fs::temp_directory_path() / ("loom_cli_junk_" + std::to_string(::getpid()) + ".gguf");
  std::ofstream(junk) << "not a model";
  r = loom("generate --model " + junk.string() + " --prompt-ids 1,2 --max-new-tokens 2");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("GGUF"), std::string::npos) << r.out;
  r = loom("convert --to gguf --quantize q3_k --out " + out.string() + " --force");
  EXPECT_NE(r.exit_code, 0) << r.out;  // a flag CLI11 rejects: its own usage exit code
  EXPECT_NE(r.out.find("q3_k"), std::string::npos) << r.out;
  fs::remove(out);
  fs::remove(junk);
}
}  // namespace
