// One translator for every binding: loom::Error → a loom exception class that
// also derives from the built-in exception Python code expects for that kind of
// error (ValueError for bad values, FileNotFoundError for missing files, …), so
// `except ValueError` and `except loom.LoomError` both work.
#include <string>

#include "bindings.h"

namespace loom::python {

namespace {

struct ErrorClasses {
  PyObject* base = nullptr;            // loom.LoomError(RuntimeError)
  PyObject* invalid_argument = nullptr;  // ValueError
  PyObject* not_found = nullptr;         // FileNotFoundError
  PyObject* io = nullptr;                // OSError
  PyObject* timeout = nullptr;           // TimeoutError
  PyObject* cancelled = nullptr;
  PyObject* resource_exhausted = nullptr;
  PyObject* failed_precondition = nullptr;
};
ErrorClasses classes;

PyObject* new_class(py::module_& m, const char* name, std::initializer_list<PyObject*> bases, const char* doc) {
  py::tuple t(bases.size());
  size_t i = 0;
  for (PyObject* b : bases) t[i++] = py::reinterpret_borrow<py::object>(b);
  const std::string qualified = std::string("loom.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, t.ptr(), nullptr);
  if (!cls) throw py::error_already_set();
  m.add_object(name, py::reinterpret_borrow<py::object>(cls));
  return cls;
}

PyObject* class_for(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kParseError:
    case ErrorCode::kUnsupported:
    case ErrorCode::kOutOfRange:
      return classes.invalid_argument;
    case ErrorCode::kNotFound: return classes.not_found;
    case ErrorCode::kIoError: return classes.io;
    case ErrorCode::kTimeout: return classes.timeout;
    case ErrorCode::kCancelled: return classes.cancelled;
    case ErrorCode::kResourceExhausted: return classes.resource_exhausted;
    case ErrorCode::kFailedPrecondition: return classes.failed_precondition;
    default: return classes.base;
  }
}

}  // namespace

bool python_alive() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

void register_errors(py::module_& m) {
  classes.base = new_class(m, "LoomError", {PyExc_RuntimeError}, "An error reported by loom; the message names what was wrong.");
  classes.invalid_argument =
      new_class(m, "InvalidArgumentError", {classes.base, PyExc_ValueError}, "A bad value: argument, field, file contents.");
  classes.not_found = new_class(m, "NotFoundError", {classes.base, PyExc_FileNotFoundError}, "A file or folder that does not exist.");
  classes.io = new_class(m, "IoError", {classes.base, PyExc_OSError}, "Reading or writing a file failed.");
  classes.timeout = new_class(m, "LoomTimeoutError", {classes.base, PyExc_TimeoutError}, "A wait ran out of time.");
  classes.cancelled = new_class(m, "CancelledError", {classes.base}, "The operation was cancelled.");
  classes.resource_exhausted =
      new_class(m, "ResourceExhaustedError", {classes.base}, "A memory budget, queue or pool is full.");
  classes.failed_precondition =
      new_class(m, "FailedPreconditionError", {classes.base}, "Called in the wrong state (e.g. a destroyed manager).");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      // The message without the code prefix: the exception's class says it.
      const Status& s = e.status();
      py::tuple args = py::make_tuple(s.message());
      PyObject* cls = class_for(s.code());
      PyErr_SetObject(cls, args.ptr());
    }
  });
}

}  // namespace loom::python
