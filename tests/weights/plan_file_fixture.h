// A checkpoint written to a temporary file, loaded through a plan, and saved
// back: the steps every load/save test of the weights layer takes. Subclasses
// compile (or compose) the plan between write_checkpoint and load_with.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <set>
#include <string>

#include "io/io_test_util.h"
#include "loom/io/checkpoint.h"
#include "loom/io/safetensors_writer.h"
#include "loom/weights/conversion_plan.h"

namespace loom::testing {

class PlanFileFixture : public ::testing::Test {
 protected:
  // Writes `tensors` as model.safetensors and opens it; the index is what a plan compiles against.
  SourceIndex write_checkpoint(const NamedTensors& tensors, SafetensorsOrder order) {
    path_ = dir_.file("model.safetensors");
    auto st = write_safetensors(path_, tensors, {{"format", "pt"}}, order);
    EXPECT_TRUE(st.ok()) << st.to_string();
    auto ck = Checkpoint::open(path_);
    EXPECT_TRUE(ck.ok()) << ck.status().to_string();
    ckpt_.emplace(std::move(ck).value());
    return SourceIndex::from_checkpoint(*ckpt_);
  }

  // Keeps the plan and streams the checkpoint through it; each parameter must arrive once.
  // `have`: parameters the caller already holds (ConversionPlan::load).
  std::map<std::string, Tensor> load_with(Result<ConversionPlan> plan, const std::set<std::string>& have = {}) {
    EXPECT_TRUE(plan.ok()) << plan.status().to_string();
    if (!plan.ok()) return {};
    plan_.emplace(std::move(plan).value());
    std::map<std::string, Tensor> params;
    auto stats = plan_->load(*ckpt_, [&](const std::string& name, Tensor t) {
      EXPECT_TRUE(params.emplace(name, std::move(t)).second) << name << " delivered twice";
      return Status::Ok();
    }, have);
    EXPECT_TRUE(stats.ok()) << stats.status().to_string();
    stats_ = stats.ok() ? stats.value() : LoadStats{};
    return params;
  }

  // Saves the parameters back and checks the file equals the original.
  void expect_round_trip(const std::map<std::string, Tensor>& params) {
    const std::string out = dir_.file("saved.safetensors");
    auto st = plan_->save(params_from(params), out);
    ASSERT_TRUE(st.ok()) << st.to_string();
    const std::string a = read_file(path_), b = read_file(out);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_TRUE(a == b) << "saved file differs from the original";
  }

  TempDir dir_;
  std::string path_;
  std::optional<Checkpoint> ckpt_;
  std::optional<ConversionPlan> plan_;
  LoadStats stats_;
};

}  // namespace loom::testing
