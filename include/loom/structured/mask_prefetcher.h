// Computes the masks the next sampling will need while the step's forward pass runs.
// Before a step, the batching loop knows every constrained request's automaton state
// (its last token is accepted); the mask for that state is what the sampler asks for
// when the logits arrive. One worker thread, started on the first submit, computes
// them in order into the constraints' caches. The sampler never waits for a job not
// yet started: it computes that mask itself (Constraint::mask claims it), and it
// waits only for a mask the worker is computing. A mask is a function of the state
// alone, so who computes it changes nothing in the output.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "loom/structured/constraint.h"

namespace loom::structured {

class MaskPrefetcher {
 public:
  struct Job {
    std::shared_ptr<Constraint> constraint;
    AutomatonState state;
  };
  MaskPrefetcher() = default;
  ~MaskPrefetcher();
  MaskPrefetcher(const MaskPrefetcher&) = delete;
  MaskPrefetcher& operator=(const MaskPrefetcher&) = delete;

  // Replaces the jobs not yet started (their requests have moved on) with these.
  void submit(std::vector<Job> jobs);

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool quit_ = false;
  std::thread worker_;
};

}  // namespace loom::structured
