// `loom export --model DIR --format program --out DIR2`: capture the model's
// step graph through the export pipeline (patches, node fixes, signature and
// dimensions, program fixes, metadata) and write an ExportedProgram that loom
// loads and runs. `--format onnx --out model.onnx [--opset N] [--onnx-ops
// standard|ort] [--dynamic | --batch-size B --seq-len S --past-length P]`: lower
// it to ONNX with Optimum's decoder signature, dims named (--dynamic) or fixed. `--format
// portable --out model.lpte [--backend reference|cpu_simd]`: a memory-planned
// program for loom_portable (src/portable). Prints the stages' summary: which
// patches, how many nodes each fix rewrote.
#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "loom/export/onnx_exporter.h"
#include "loom/export/portable_exporter.h"
#include "loom/export/program_exporter.h"
#include "loom/export/program_io.h"

namespace loom::cli {

namespace {

struct ExportArgs {
  std::string model_dir, out, format = "program";
  bool dynamic = false, strict = false;
  int64_t batch_size = 1, seq_len = 128;
  int64_t past_length = 0;  // ONNX static: past_sequence_length
  int64_t max_tokens = 0;  // dynamic: upper bound of "tokens" (0: max_position_embeddings)
  int opset = exporting::kOnnxDefaultOpset;
  std::string onnx_ops = "standard";
  bool no_optimize = false;
  int64_t external_threshold = 1024;
  std::string backend = "reference";  // portable: a registered backend preparation
  std::string kernel_config;          // a KernelConfig JSON: the graph records its kernels
  std::vector<std::string> plugin_dirs, trusted_plugin_dirs;
  int64_t max_positions = 0;          // portable: KV cache length (0: the model's, at most 4096)
  bool seq_len_given = false, external_threshold_given = false;  // portable: static chunks; its own default threshold
  bool f32_weights = false;                                       // portable: no bf16 weights
};

// The model as every format captures it: with the kernels of --kernel-config, if any.
std::shared_ptr<models::Model> load_for_export(const ExportArgs& a) {
  ModelOptions mo;
  mo.model_dir = a.model_dir;
  mo.kernel_config = a.kernel_config;
  // The exported graph is the checkpoint's modules unless --kernel-config asks
  // for kernels (exporters do not lower every fused op).
  mo.builtin_fusions = false;
  mo.plugin_dirs = a.plugin_dirs;
  mo.trusted_plugin_dirs = a.trusted_plugin_dirs;
  const std::string dir = resolve_model_dir(mo).value();
  std::fprintf(stderr, "export: loading %s\n", dir.c_str());
  return load_model(dir, mo).value();
}

void run_onnx_export(const ExportArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  auto model = load_for_export(a);
  exporting::OnnxExportOptions o;
  o.opset = a.opset;
  o.ops = a.onnx_ops;
  o.strict = a.strict;
  o.optimize = !a.no_optimize;
  o.external_data_threshold = a.external_threshold;
  o.dynamic = a.dynamic;
  o.batch_size = a.batch_size;
  o.sequence_length = a.seq_len;
  o.past_length = a.past_length;
  exporting::OnnxExportReport report;
  const Status s = exporting::export_onnx(*model, a.out, o, &report);
  if (!s.ok()) throw Error(s);
  for (const std::string& line : report.lines()) std::fprintf(stderr, "export: %s\n", line.c_str());
  std::fprintf(stderr, "export: wrote %s (opset %d, %s ops, %s) in %.2f s\n", a.out.c_str(), a.opset, a.onnx_ops.c_str(),
               report.signature.c_str(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

void run_portable_export(const ExportArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  auto model = load_for_export(a);
  exporting::PortableExportOptions o;
  o.backend = a.backend;
  o.strict = a.strict;
  if (a.max_tokens > 0) o.max_tokens = a.max_tokens;
  o.max_positions = a.max_positions;
  // Static (every chunk exactly --seq-len rows) only when asked for with --seq-len
  // and without --dynamic; dynamic chunks of 1..--max-tokens otherwise.
  if (a.seq_len_given && !a.dynamic) {
    o.dynamic = false;
    o.max_tokens = a.seq_len;
  }
  if (a.external_threshold_given) o.external_weights_threshold = a.external_threshold;
  o.keep_bf16 = !a.f32_weights;
  exporting::PortableExportReport report;
  const Status s = exporting::export_portable(*model, a.out, o, &report);
  if (!s.ok()) throw Error(s);
  for (const std::string& line : report.lines()) std::fprintf(stderr, "export: %s\n", line.c_str());
  std::fprintf(stderr, "export: wrote %s (backend %s, %s %lld tokens per chunk) in %.2f s\n", a.out.c_str(), a.backend.c_str(),
               o.dynamic ? "at most" : "static,", static_cast<long long>(o.max_tokens),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

void run_export(const ExportArgs& a) {
  if (a.format == "onnx") return run_onnx_export(a);
  if (a.format == "portable") return run_portable_export(a);
  if (a.format != "program")
    throw Error(unsupported("--format " + a.format + ": the formats are program, onnx and portable"));
  const auto t0 = std::chrono::steady_clock::now();
  auto model = load_for_export(a);
  exporting::ProgramExportOptions o;
  o.dynamic = a.dynamic;
  o.strict = a.strict;
  if (a.dynamic) {
    if (a.max_tokens > 0) o.ranges["tokens"] = {1, a.max_tokens};
  } else {
    if (a.batch_size < 1 || a.seq_len < 1) throw Error(invalid_argument("--batch-size and --seq-len must be ≥ 1"));
    o.static_sizes = {{"tokens", a.batch_size * a.seq_len}, {"sequences", a.batch_size}};
  }
  exporting::ExportSummary summary;
  exporting::ExportedProgram p = exporting::export_program(*model, o, &summary).value();
  for (const std::string& line : summary.lines()) std::fprintf(stderr, "export: %s\n", line.c_str());
  Status s = exporting::save_program(p, a.out);
  if (!s.ok()) throw Error(s);
  std::string dims;
  for (const auto& [name, r] : p.dims)
    dims += " " + name + "∈[" + std::to_string(r.min) + "," + (r.max ? std::to_string(r.max) : std::string("∞")) + "]";
  std::fprintf(stderr, "export: wrote %s (%zu nodes, %zu parameters;%s) in %.2f s\n", a.out.c_str(),
               p.graph.nodes().size(), p.graph.parameters().size(),
               dims.empty() ? (" static " + std::to_string(a.batch_size) + "×" + std::to_string(a.seq_len)).c_str() : dims.c_str(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("export", "Export the model's graph (a loom program, an ONNX file or a portable program) through the staged export pipeline");
  auto a = std::make_shared<ExportArgs>();
  cmd->add_option("--model,-m", a->model_dir, "Checkpoint folder (default: the bundled model)");
  cmd->add_option("--out,-o", a->out, "Output folder (program), .onnx file (onnx) or .lpte file (portable)")->required();
  cmd->add_option("--format,-f", a->format, "program, onnx or portable");
  cmd->add_option("--backend", a->backend, "Portable: the backend preparation (reference or cpu_simd)");
  cmd->add_option("--max-positions", a->max_positions, "Portable: KV cache length (default the model's, at most 4096)");
  cmd->add_flag("--f32-weights", a->f32_weights,
                "Portable: store every weight in f32 (default: a bf16 checkpoint's matrices stay bf16, read exactly)");
  cmd->add_option("--opset", a->opset, "ONNX: opset version (default 17, the newest Debian's onnx checker accepts)");
  cmd->add_option("--onnx-ops", a->onnx_ops,
                  "ONNX: standard (plain ONNX ops) or ort (ONNX Runtime contrib ops where they apply: GroupQueryAttention, "
                  "RotaryEmbedding, SkipSimplifiedLayerNormalization; the file then runs only in ONNX Runtime)");
  cmd->add_option("--external-data-threshold", a->external_threshold,
                  "ONNX: initializers of at least this many bytes go to <out>.data (negative: none). Portable: weights of at "
                  "least this many f32 bytes go to <out>.weights, mapped by the runtime (default 1 MiB; negative: none)");
  cmd->add_flag("--no-optimize", a->no_optimize, "ONNX: skip the optimizer stage");
  cmd->add_flag("--dynamic", a->dynamic,
                "Program: keep the token and sequence counts dynamic (else fixed to --batch-size/--seq-len). ONNX: named "
                "dims batch_size, sequence_length, past_sequence_length (else fixed to --batch-size/--seq-len/--past-length)");
  cmd->add_option("--max-tokens", a->max_tokens, "With --dynamic: most tokens per step (default max_position_embeddings); portable: tokens per chunk (default 32)");
  cmd->add_option("--batch-size", a->batch_size, "Static export: sequences per step (default 1)");
  cmd->add_option("--seq-len,--sequence-length", a->seq_len,
                  "Static export: tokens per sequence (default 128); portable: given without --dynamic, a static program "
                  "whose chunks are exactly this many rows");
  cmd->add_option("--past-length", a->past_length,
                  "ONNX static export: cached tokens fed as past_key_values (default 0: a prefill file; a decode file: "
                  "--seq-len 1 --past-length N)");
  cmd->add_option("--kernel-config", a->kernel_config, "KernelConfig JSON: capture the graph with the kernels it picks");
  cmd->add_option("--plugin-dir", a->plugin_dirs, "A directory of plugin kernels (loading them needs trust_remote_code)");
  cmd->add_option("--trusted-plugin-dir", a->trusted_plugin_dirs, "A directory of trusted plugin kernels");
  cmd->add_flag("--strict", a->strict, "A patch whose path resolves to nothing is an error, not a warning");
  cmd->callback([a, cmd] {
    a->seq_len_given = cmd->count("--seq-len") > 0;
    a->external_threshold_given = cmd->count("--external-data-threshold") > 0;
    run_export(*a);
  });
}

}  // namespace loom::cli
