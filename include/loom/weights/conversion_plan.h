// A conversion plan: weight rules resolved against one checkpoint's headers and
// one model instance's expected parameters, before any tensor byte is read.
//
//   LOOM_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(dir));
//   LOOM_ASSIGN_OR_RETURN(ConversionPlan plan,
//                         ConversionPlan::compile(rules, SourceIndex::from_checkpoint(ckpt), expected));
//   for (const auto& name : plan.unused_sources()) log_warn(...);   // or plan.warn_unused(what)
//   LOOM_ASSIGN_OR_RETURN(LoadStats st, plan.load(ckpt, [&](const std::string& n, Tensor t) { ...; return Status::Ok(); }));
//   ...
//   LOOM_RETURN_IF_ERROR(plan.save(params_from(map), "out_dir"));      // the original layout again
//
// compile() checks, naming the rule and the key in every message:
//   - every pattern parses, every required rule matches some checkpoint tensor;
//   - no checkpoint tensor feeds two converters ("conflicting rules") or two
//     source patterns of one converter ("consumed twice"); renamings do not map
//     two tensors to one name;
//   - every converter instance finds a tensor for each source pattern ("missing
//     source"), and produces only parameters the model expects;
//   - shapes inferred through each op chain equal the expected shapes (Chunk
//     sizes come from the targets' shapes, so GQA q/k/v split unevenly);
//   - every expected parameter is written exactly once (unless
//     allow_missing_params, which lists the missing ones instead).
// Checkpoint tensors no rule consumes pass through by name when the model
// expects that name; the others are unused_sources() for the caller to warn about.
//
// load() streams group by group: a group whose chain is identity hands the sink a
// zero-copy view into the mmap; a converted group materializes only its own
// outputs (and intermediates), so extra memory is bounded by the largest group
// (LoadStats::peak_group_bytes). save() runs every chain reversed and writes the
// original names, shapes, dtypes and file order, so load → save reproduces the
// original file byte for byte (when the model keeps the checkpoint's dtypes).
//
// Two stages (compose()). Rules written by different owners do not share a
// vocabulary: an architecture's rules read checkpoint keys and produce the
// module tree's own parameter names (Phi3: qkv_proj → q/k/v_proj), and a kernel
// Layout's rules read those parameter names (FusedQKV: q/k/v_proj → qkv_proj).
// So they are compiled as two plans, not one rule list:
//   stage 1 = compile(architecture rules, checkpoint headers, the module tree's
//             parameters);
//   stage 2 = compile(layout rules, a SourceIndex of stage 1's outputs (names,
//             shapes, dtypes as stage 1 produces them), the final parameters).
// Every check of compile() runs on both stages before any byte is read, and
// messages name the stage ("layout rule #2 …", "parameter 'q_proj'" instead of
// "checkpoint tensor"). A stage-2 source that is not a stage-1 output gets a
// hint naming the stage-1 rule that consumed the checkpoint tensor it does
// match (a layout written against checkpoint names), so such an error names
// both rules. Every stage-1 output must reach a stage-2 group or be a final
// parameter, since save has to reproduce it.
//
// Loading a composed plan streams stage-1 groups in checkpoint order; each
// output goes to the stage-2 group reading it, which runs (and hands its
// parameters to the sink) as soon as its last input arrives. Only outputs whose
// stage-2 group still waits are held, and views into the mmap cost nothing, so
// extra memory is bounded by what is buffered plus one group: peak_group_bytes
// then counts the buffered bytes at that moment too (peak_buffered_bytes alone).
// Identity chains in both stages keep zero-copy views, and so does a stage-1
// Chunk whose pieces exactly one stage-2 Concatenate joins again (same order,
// dimension and sizes: Phi3's qkv_proj and gate_up_proj under FusedQKV and
// RMSNormMLP), which load treats as the identity it is. Other chains are not
// fused across stages; they run one after the other. Saving runs stage 2
// reversed (final parameters → module parameters), then stage 1 reversed.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "loom/core/dtype.h"
#include "loom/core/status.h"
#include "loom/core/tensor.h"
#include "loom/io/checkpoint.h"
#include "loom/io/safetensors_writer.h"
#include "loom/weights/conversion_ops.h"
#include "loom/weights/weight_rule.h"

namespace loom {

// Headers of a checkpoint: what compile() may look at.
struct SourceTensor {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::string file;  // file name (no directory) of the shard holding it
};

struct SourceIndex {
  std::vector<SourceTensor> tensors;  // files in order, each in its data order
  std::vector<std::string> files;     // file names, in order
  std::map<std::string, std::map<std::string, std::string>> metadata;  // per file: "__metadata__"
  bool sharded = false;
  std::string index_file;  // e.g. model.safetensors.index.json when sharded

  static SourceIndex from_checkpoint(const Checkpoint& checkpoint);
  // For building an index by hand (tests, conversions without a file): one file.
  void add(std::string name, DType dtype, Shape shape, std::string file = "model.safetensors");
};

struct ExpectedParam {
  Shape shape;
  std::optional<DType> dtype;  // unset: keep the checkpoint's dtype
};
using ExpectedParams = std::map<std::string, ExpectedParam>;

struct CompileOptions {
  bool allow_missing_params = false;
  // How messages name the rules ("rule #2 …") and what they read: a second
  // stage's rules read parameters, not checkpoint tensors.
  std::string rules_name = "rule";
  std::string sources_name = "checkpoint tensor";
  // Extra text for a source pattern that matches nothing (or a missing source
  // key), e.g. where it does match in an earlier stage. Returns "" for no hint.
  std::function<std::string(const std::string& pattern)> unmatched_hint;
};

struct PlanTensor {
  std::string name;
  Shape shape;
  DType dtype = DType::kF32;
};

// One unit of work: the tensors one rule instance reads and the parameters it
// writes. Slots are as in conversion_ops.h.
struct ConversionGroup {
  int rule = -1;  // index into the rules; -1 when the tensor passes through unchanged
  std::string rule_description;
  std::vector<std::vector<PlanTensor>> sources;  // checkpoint names (before renaming)
  std::vector<std::vector<PlanTensor>> targets;  // parameter names; dtype as the chain produces it
  std::vector<std::vector<DType>> target_model_dtypes;  // what the model stores (cast when different)
  std::vector<ConversionOp> ops;                 // resolved: Chunk sizes filled, check_dims decided

  bool identity() const;  // no op and no cast: the sink gets the mmap view
  std::string describe() const;
};

struct LoadStats {
  size_t groups = 0;
  size_t zero_copy_params = 0;
  size_t materialized_params = 0;
  uint64_t materialized_bytes = 0;  // sum over groups
  uint64_t peak_group_bytes = 0;    // most bytes one group allocated (intermediates + outputs);
                                    // composed: plus what was buffered for stage 2 at that moment
  std::string peak_group;           // its description
  uint64_t peak_buffered_bytes = 0;  // composed: most materialized stage-1 bytes waiting for stage 2
  size_t skipped_params = 0;         // not produced: the caller already had them (load's `have`)
};

// Receives each converted parameter once; an error stops the load.
using ParamSink = std::function<Status(const std::string& name, Tensor value)>;
// Yields a model parameter by name (for save).
using ParamSource = std::function<Result<Tensor>(const std::string& name)>;
ParamSource params_from(const std::map<std::string, Tensor>& params);

class ConversionPlan {
 public:
  static Result<ConversionPlan> compile(const WeightRules& rules, const SourceIndex& source,
                                        const ExpectedParams& expected, const CompileOptions& options = {});

  // A second stage on `first`: `rules` are compiled against first's outputs and
  // must produce `expected` (the final parameters). Errors name the rule and the
  // key, as compile()'s do; also an error: a first-stage output that no rule
  // reads and `expected` does not list (it could not be saved back).
  static Result<ConversionPlan> compose(ConversionPlan first, const WeightRules& rules, const ExpectedParams& expected,
                                        const CompileOptions& options = {});

  // Stage 1 (checkpoint → first-stage names) for a composed plan.
  const std::vector<ConversionGroup>& groups() const { return groups_; }
  // The second stage (sources are stage-1 outputs); nullptr unless composed.
  const ConversionPlan* second_stage() const { return second_.get(); }
  // Checkpoint tensors nothing reads (stage 1).
  const std::vector<std::string>& unused_sources() const { return unused_; }
  // Final parameters nothing writes (the last stage).
  const std::vector<std::string>& missing_params() const { return second_ ? second_->missing_ : missing_; }
  const SourceIndex& source() const { return source_; }
  // unused_sources(), logged with log_warn naming `what` (if any).
  void warn_unused(const std::string& what) const;
  std::string describe() const;

  // Streams `checkpoint` (which must have the headers the plan was compiled
  // from) into `sink`. `have` names final parameters the caller already holds (the
  // weights cache of an earlier load): a group that writes only such parameters is
  // neither read nor run, and neither is a first-stage group feeding only such
  // groups; a group writing some of them runs whole and hands the sink all it writes.
  Result<LoadStats> load(const Checkpoint& checkpoint, const ParamSink& sink,
                         const std::set<std::string>& have = {}) const;

  // The original checkpoint tensors from the model's parameters, in the
  // original file order. `carry_unused` (optional) supplies unused_sources()
  // so they survive a round trip.
  Result<NamedTensors> reverse(const ParamSource& params, const Checkpoint* carry_unused = nullptr) const;

  // Writes reverse(params). `out_path` ending in ".safetensors" gets every
  // tensor in one file (metadata of the first source file); otherwise it is a
  // directory receiving the source's file names (and its index when sharded).
  Status save(const ParamSource& params, const std::string& out_path, const Checkpoint* carry_unused = nullptr) const;

 private:
  SourceIndex source_;
  std::vector<ConversionGroup> groups_;
  std::vector<std::string> unused_;
  std::vector<std::string> missing_;
  std::shared_ptr<const ConversionPlan> second_;

  Result<LoadStats> load_composed(const Checkpoint& checkpoint, const ParamSink& sink,
                                  const std::set<std::string>& have) const;
  Result<NamedTensors> reverse_stage(const ParamSource& params, const Checkpoint* carry_unused) const;
};

}  // namespace loom
