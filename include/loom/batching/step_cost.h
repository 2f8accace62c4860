// What a step's rows cost, learned from the steps the manager runs, and whether a
// request's draft pays for its rows. On a CPU a step costs about
//   seconds ≈ fixed + per_row × rows
// where `fixed` is reading the weights once (the memory bound) and `per_row` each
// row's arithmetic. At small batch per_row × rows is far below fixed, so drafted rows
// are nearly free; as the batch grows the step becomes compute-bound and a drafted
// row costs as much as the token it might save. The fit is a least-squares line over
// recent steps (exponentially weighted), so it follows the machine and the model as
// they are, not a constant.
#pragma once

#include <cstdint>

namespace loom::batching {

class StepCostModel {
 public:
  // Weight of the oldest steps decays by this per step (about the last 200 count).
  static constexpr double kDecay = 0.995;
  void record(int64_t rows, double seconds);
  // Enough steps of different sizes were seen to tell per_row from fixed.
  bool known() const;
  double fixed() const { return fixed_; }
  double per_row() const { return per_row_; }

 private:
  double w_ = 0, x_ = 0, y_ = 0, xx_ = 0, xy_ = 0;  // weighted sums of 1, rows, s, rows², rows·s
  double fixed_ = 0, per_row_ = 0;
};

// Tokens a draft of k is expected to add when each drafted token is accepted with
// probability `acceptance` given the ones before it were: a + a² + … + a^k.
double expected_accepted(int64_t k, double acceptance);

// Whether drafting k more rows, expected to add `gain` tokens, raises the step's tokens
// per second: the draft's own rate (gain over its rows' cost) must beat the step's
// rate with what is planned so far (`tokens` from `rows`). True while the cost is
// unknown: adaptive draft lengths alone then keep drafting cheap.
bool draft_pays(const StepCostModel& cost, int64_t rows, double tokens, int64_t k, double gain);

}  // namespace loom::batching
