// _Manager: ContinuousBatchingManager (upstream's names). Blocking calls release
// the GIL and wait in short slices, so Ctrl-C interrupts them; result handlers
// are Python callables run on the batching thread with the GIL taken for the
// call. Destroying the manager never holds the GIL while the loop ends (a
// handler may be waiting for it).
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "bindings.h"
#include "generation_config_json.h"
#include "model_handle.h"
#include "python_callable.h"

namespace loom::python {

namespace {

using batching::ContinuousBatchingManager;
using batching::GenerationOutput;
using batching::PauseGuard;
using batching::RequestOptions;

constexpr double kWaitSlice = 0.05;  // seconds between checks for Ctrl-C

// Teardowns left to threads of their own (a manager closed from its own result
// handler). Python waits for them at exit (loom/__init__.py registers
// wait_for_teardowns with atexit): an interpreter that finalizes while one still
// joins its loop, whose handler is returning into Python, ends in std::terminate.
struct PendingTeardowns {
  std::mutex mu;
  std::condition_variable cv;
  int running = 0;
};
PendingTeardowns& pending_teardowns() {
  static PendingTeardowns* p = new PendingTeardowns;  // never destroyed: threads may outlive exit
  return *p;
}

void wait_for_teardowns(double timeout) {
  PendingTeardowns& p = pending_teardowns();
  py::gil_scoped_release release;  // the loops' handlers need the GIL to return
  std::unique_lock<std::mutex> lk(p.mu);
  p.cv.wait_for(lk, std::chrono::duration<double>(timeout), [&] { return p.running == 0; });
}

struct ManagerHandle {
  std::shared_ptr<ThreadPool> pool;  // the model's, kept while the manager may outlive the model
  ~ManagerHandle() { close(); }
  void close() {
    std::shared_ptr<ContinuousBatchingManager> doomed = share();
    if (!doomed) return;
    if (doomed->on_loop_thread()) {
      // A result handler (or the last reference, dropped by one): the loop cannot
      // join itself, so it is only told to end here, and a thread of its own
      // finishes the teardown once it has.
      doomed->destroy();
      drop();
      PendingTeardowns& p = pending_teardowns();
      {
        std::lock_guard<std::mutex> lk(p.mu);
        ++p.running;
      }
      std::thread([doomed, pool = pool, &p]() mutable {
        doomed->destroy();
        doomed.reset();  // the manager and the pool go before the count says done
        pool.reset();
        {
          std::lock_guard<std::mutex> lk(p.mu);
          --p.running;
        }
        p.cv.notify_all();
      }).detach();
      return;
    }
    if (PyGILState_Check()) {
      py::gil_scoped_release release;
      doomed->destroy();
    } else {
      doomed->destroy();
    }
    drop();
  }
  // A reference for the duration of one call: destroy() from another thread may
  // drop the handle's own meanwhile, and the manager must outlive the call.
  std::shared_ptr<ContinuousBatchingManager> get() const {
    std::shared_ptr<ContinuousBatchingManager> m = share();
    if (!m) throw Error(failed_precondition("the ContinuousBatchingManager was destroyed"));
    return m;
  }
  // Null once destroyed. Calls read it without the GIL, so it is guarded.
  std::shared_ptr<ContinuousBatchingManager> share() const {
    std::lock_guard<std::mutex> lk(mu);
    return m;
  }
  void set(std::shared_ptr<ContinuousBatchingManager> manager) {
    std::lock_guard<std::mutex> lk(mu);
    m = std::move(manager);
  }

 private:
  void drop() {
    std::lock_guard<std::mutex> lk(mu);
    m.reset();
  }
  mutable std::mutex mu;
  std::shared_ptr<ContinuousBatchingManager> m;
};

std::shared_ptr<ManagerHandle> create(ModelHandle& h, const std::string& gc_json, const std::string& cb_json) {
  const GenerationConfig gc = call_generation_config(h, gc_json);
  const batching::ContinuousBatchingConfig cb = parse_cb_config(cb_json);
  py::gil_scoped_release release;
  std::shared_ptr<batching::ModelRunner> runner = h.new_runner();
  auto out = std::make_shared<ManagerHandle>();
  out->pool = h.pool;
  out->set(unwrap(ContinuousBatchingManager::create(runner, gc, cb, h.manager_options())));
  return out;
}

// Waits for an output in slices; None on timeout or once the manager stopped
// with nothing left to deliver (the C++ get_result's nullopt).
py::object get_result(ManagerHandle& h, std::optional<std::string> request_id, std::optional<double> timeout) {
  const std::shared_ptr<ContinuousBatchingManager> m = h.get();
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  while (true) {
    double slice = kWaitSlice;
    if (timeout) {
      const double left = *timeout - std::chrono::duration<double>(Clock::now() - start).count();
      slice = std::max(0.0, std::min(slice, left));
    }
    std::optional<GenerationOutput> out;
    bool running = false;
    {
      py::gil_scoped_release release;
      out = m->get_result(request_id, slice);
      running = m->is_running();
    }
    if (out) return py::cast(std::move(*out));
    raise_pending_signals();
    if (!running) return py::none();
    if (timeout && std::chrono::duration<double>(Clock::now() - start).count() >= *timeout) return py::none();
  }
}

void register_result_handler(ManagerHandle& h, const std::string& request_id, py::object callback) {
  std::shared_ptr<py::object> fn = share_callable(std::move(callback));
  batching::ResultCallback cb = [fn](const GenerationOutput& o) {
    if (!python_alive()) return;
    py::gil_scoped_acquire gil;
    try {
      (*fn)(o);
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("loom: a result handler raised");
    }
  };
  const std::shared_ptr<ContinuousBatchingManager> m = h.get();
  py::gil_scoped_release release;
  check(m->register_result_handler(request_id, std::move(cb)));
}

// pause()'s guard for Python: it keeps the manager alive, so releasing it after
// destroy() (or from another thread) is safe, and releasing twice is a no-op.
struct PauseHandle {
  std::shared_ptr<ContinuousBatchingManager> m;  // declared first: outlives the guard
  PauseGuard guard;
  void release() { guard.release(); }
};

std::shared_ptr<PauseHandle> pause(ManagerHandle& h) {
  std::shared_ptr<ContinuousBatchingManager> m = h.get();
  py::gil_scoped_release release;
  PauseGuard guard = unwrap(m->pause());
  return std::make_shared<PauseHandle>(PauseHandle{std::move(m), std::move(guard)});
}

py::dict stats(const ManagerHandle& h) {
  const std::shared_ptr<ContinuousBatchingManager> m = h.share();
  const batching::ManagerStats s = m ? m->stats() : batching::ManagerStats{};
  py::dict d;
  d["requests_added"] = s.requests_added;
  d["finished"] = s.finished;
  d["failed"] = s.failed;
  d["cancelled"] = s.cancelled;
  d["prompt_tokens"] = s.prompt_tokens;
  d["generated_tokens"] = s.generated_tokens;
  d["drafted_tokens"] = s.drafted_tokens;
  d["accepted_draft_tokens"] = s.accepted_draft_tokens;
  d["computed_tokens"] = s.computed_tokens;
  d["steps"] = s.steps;
  d["prefix_hit_tokens"] = s.prefix_hit_tokens;
  d["waiting"] = s.waiting;
  d["running"] = s.running;
  d["pages_capacity"] = s.pages_capacity;
  d["pages_in_use"] = s.pages_in_use;
  d["peak_pages_in_use"] = s.peak_pages_in_use;
  return d;
}

}  // namespace

void register_manager(py::module_& m) {
  m.def("_wait_for_teardowns", &wait_for_teardowns, py::arg("timeout"),
        "Waits (up to timeout seconds) for managers closed from their own result handlers to finish tearing down");
  py::class_<RequestOptions>(m, "_RequestOptions")
      .def(py::init<>())
      .def_readwrite("request_id", &RequestOptions::request_id)
      .def_readwrite("max_new_tokens", &RequestOptions::max_new_tokens)
      .def_readwrite("streaming", &RequestOptions::streaming)
      .def_readwrite("record_timestamps", &RequestOptions::record_timestamps)
      .def_readwrite("eos_token_ids", &RequestOptions::eos_token_ids)
      .def_readwrite("do_sample", &RequestOptions::do_sample)
      .def_readwrite("temperature", &RequestOptions::temperature)
      .def_readwrite("top_k", &RequestOptions::top_k)
      .def_readwrite("top_p", &RequestOptions::top_p)
      .def_readwrite("min_p", &RequestOptions::min_p)
      .def_readwrite("repetition_penalty", &RequestOptions::repetition_penalty)
      .def_readwrite("seed", &RequestOptions::seed)
      .def_readwrite("stop_strings", &RequestOptions::stop_strings)
      .def_readwrite("num_return_sequences", &RequestOptions::num_return_sequences)
      .def_readwrite("queue_timeout", &RequestOptions::queue_timeout)
      .def_readwrite("constraint", &RequestOptions::constraint);

  py::class_<PauseHandle, std::shared_ptr<PauseHandle>>(m, "_PauseGuard")
      .def("release", &PauseHandle::release, py::call_guard<py::gil_scoped_release>());

  py::class_<ManagerHandle, std::shared_ptr<ManagerHandle>>(m, "_Manager")
      .def_static("create", &create, py::arg("model"), py::arg("generation_config_json"),
                  py::arg("continuous_batching_config_json"))
      .def(
          "add_request",
          [](ManagerHandle& h, std::vector<int32_t> ids, const RequestOptions& o) {
            return unwrap(h.get()->add_request(std::move(ids), o));
          },
          py::arg("input_ids"), py::arg("options"), py::call_guard<py::gil_scoped_release>())
      .def(
          "cancel_request", [](ManagerHandle& h, const std::string& id) { check(h.get()->cancel_request(id)); },
          py::arg("request_id"), py::call_guard<py::gil_scoped_release>())
      .def("get_result", &get_result, py::arg("request_id") = py::none(), py::arg("timeout") = py::none())
      .def("register_result_handler", &register_result_handler, py::arg("request_id"), py::arg("callback"))
      .def(
          "start", [](ManagerHandle& h) { check(h.get()->start()); }, py::call_guard<py::gil_scoped_release>())
      .def(
          "stop",
          [](ManagerHandle& h, bool block, std::optional<double> timeout, bool keep_for_next_session, bool hard_stop) {
            check(h.get()->stop(block, timeout, keep_for_next_session, hard_stop));
          },
          py::arg("block") = true, py::arg("timeout") = py::none(), py::arg("keep_for_next_session") = false,
          py::arg("hard_stop") = false, py::call_guard<py::gil_scoped_release>())
      .def(
          "join",
          [](ManagerHandle& h, std::optional<double> timeout) {
            const Status ended = h.get()->join(timeout);
            if (ended.code() == ErrorCode::kTimeout) return false;
            check(ended);
            return true;
          },
          py::arg("timeout") = py::none(), py::call_guard<py::gil_scoped_release>())
      .def(
          "warmup", [](ManagerHandle& h) { check(h.get()->warmup()); }, py::call_guard<py::gil_scoped_release>())
      .def("pause", &pause)
      .def("is_running",
           [](const ManagerHandle& h) {
             const std::shared_ptr<ContinuousBatchingManager> m = h.share();
             return m && m->is_running();
           })
      .def("destroy", &ManagerHandle::close)
      .def_property_readonly("destroyed", [](const ManagerHandle& h) { return !h.share(); })
      .def("fatal_error",
           [](const ManagerHandle& h) -> py::object {
             const std::shared_ptr<ContinuousBatchingManager> m = h.share();
             if (!m) return py::none();
             const auto e = m->fatal_error();
             return e ? py::cast(e->to_string()) : py::none();
           })
      .def("stats", &stats);
}

}  // namespace loom::python
