// Transformers' GPU-only ContinuousBatchingConfig fields load unchanged on CPU and are
// reported in one warning when a manager is created, never again per request.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "batching_test_util.h"
#include "loom/core/logging.h"

namespace loom::batching {
namespace {

size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

TEST(GpuOnlyFields, OneWarningNamesEverySetField) {
  ContinuousBatchingConfig c;
  EXPECT_EQ(c.cpu_no_op_warning(), "");
  c.use_cuda_graph = std::make_pair(false, true);
  c.kv_padding_interval_size = 64;
  c.auto_switch_to_flash = false;
  const std::string w = c.cpu_no_op_warning();
  EXPECT_EQ(count_of(w, "no effect on CPU"), 1u) << w;
  for (const char* f : {"use_cuda_graph", "kv_padding_interval_size", "auto_switch_to_flash"})
    EXPECT_NE(w.find(f), std::string::npos) << f << " missing from: " << w;
  // Defaults (and fields that do something on CPU) are not named.
  for (const char* f : {"q_padding_interval_size", "default_compile_level", "cpu_group_timeout", "page_size"})
    EXPECT_EQ(w.find(f), std::string::npos) << f << " named in: " << w;
  EXPECT_EQ(c.cpu_no_op_fields().size(), 3u);
}

TEST(GpuOnlyFields, ManagerWarnsOnceAtCreationNotPerRequest) {
  const std::shared_ptr<const models::Model> model = testing::load_fixture("llama-f32");
  const std::shared_ptr<ModelRunner> runner = testing::make_runner(model);
  const ContinuousBatchingConfig c =
      ContinuousBatchingConfig::from_json({{"page_size", 16}, {"num_blocks", 32}, {"use_cuda_graph", true},
                                           {"default_compile_level", 2}, {"varlen_compile_config", {{"dynamic", true}}}})
          .value();
  const LogLevel level = log_level();
  set_log_level(LogLevel::kWarn);
  ::testing::internal::CaptureStderr();
  auto m = ContinuousBatchingManager::create(runner, testing::no_eos_config(), c).value();
  ASSERT_TRUE(m->start().ok());
  std::mt19937 rng(3);
  for (int i = 0; i < 3; ++i) {
    RequestOptions o;
    o.max_new_tokens = 2;
    ASSERT_TRUE(m->add_request(testing::random_tokens(rng, 4, model->vocab_size()), o).ok());
  }
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(m->get_result(std::nullopt, 60.0).has_value());
  ASSERT_TRUE(m->stop(true, 30.0).ok());
  m.reset();
  const std::string err = ::testing::internal::GetCapturedStderr();
  set_log_level(level);
  EXPECT_EQ(count_of(err, "no effect on CPU"), 1u) << err;
  for (const char* f : {"use_cuda_graph", "default_compile_level", "varlen_compile_config"})
    EXPECT_EQ(count_of(err, f), 1u) << f << " in: " << err;
}

}  // namespace
}  // namespace loom::batching
