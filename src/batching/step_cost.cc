#include "loom/batching/step_cost.h"

#include <algorithm>
#include <cmath>

namespace loom::batching {

void StepCostModel::record(int64_t rows, double seconds) {
  if (rows <= 0 || !(seconds > 0)) return;
  const double x = static_cast<double>(rows);
  w_ = kDecay * w_ + 1;
  x_ = kDecay * x_ + x;
  y_ = kDecay * y_ + seconds;
  xx_ = kDecay * xx_ + x * x;
  xy_ = kDecay * xy_ + x * seconds;
  const double var = xx_ / w_ - (x_ / w_) * (x_ / w_);
  if (var <= 0) return;
  const double cov = xy_ / w_ - (x_ / w_) * (y_ / w_);
  per_row_ = std::max(0.0, cov / var);
  fixed_ = std::max(0.0, y_ / w_ - per_row_ * x_ / w_);
}

bool StepCostModel::known() const {
  if (w_ < 8) return false;
  const double var = xx_ / w_ - (x_ / w_) * (x_ / w_);
  return var >= 1.0;  // rows spread by at least one on average
}

double expected_accepted(int64_t k, double acceptance) {
  const double a = std::clamp(acceptance, 0.0, 1.0);
  double sum = 0, p = 1;
  for (int64_t i = 0; i < k; ++i) {
    p *= a;
    sum += p;
  }
  return sum;
}

bool draft_pays(const StepCostModel& cost, int64_t rows, double tokens, int64_t k, double gain) {
  if (k <= 0) return false;
  if (!cost.known() || cost.per_row() <= 0) return true;
  const double draft_cost = cost.per_row() * static_cast<double>(k);
  const double step_cost = cost.fixed() + cost.per_row() * static_cast<double>(rows);
  // gain / draft_cost > tokens / step_cost, without dividing by a tiny cost.
  return gain * step_cost > tokens * draft_cost;
}

}  // namespace loom::batching
