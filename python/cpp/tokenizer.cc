// loom.Tokenizer's engine (_Tokenizer): encode/decode exactly as `tokenizers`;
// the Transformers-style façade (AutoTokenizer, __call__, apply_chat_template)
// is pure Python in loom/tokenization.py. Also the incremental detokenizer the
// streamers use and the chat-template renderer.
#include <nlohmann/json.hpp>

#include "bindings.h"
#include "loom/core/thread_pool.h"
#include "loom/tokenizer/chat_template.h"
#include "loom/tokenizer/incremental_detokenizer.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::python {

namespace {

py::dict encoding_dict(const Encoding& e) {
  py::dict d;
  d["ids"] = e.ids;
  d["tokens"] = e.tokens;
  d["offsets"] = e.offsets;
  d["special_tokens_mask"] = e.special_tokens_mask;
  d["type_ids"] = e.type_ids;
  return d;
}

}  // namespace

void register_tokenizer(py::module_& m) {
  using Tok = std::shared_ptr<Tokenizer>;
  py::class_<Tokenizer, Tok>(m, "_Tokenizer")
      .def_static("from_path", [](const std::string& path) { return unwrap(Tokenizer::from_path(path)); },
                  py::arg("path"), py::call_guard<py::gil_scoped_release>())
      .def(
          "encode",
          [](const Tokenizer& t, const std::string& text, bool add_special_tokens) {
            Encoding e;
            {
              py::gil_scoped_release release;
              e = unwrap(t.encode(text, add_special_tokens));
            }
            return encoding_dict(e);
          },
          py::arg("text"), py::arg("add_special_tokens") = true)
      .def(
          "encode_batch",
          [](const Tokenizer& t, const std::vector<std::string>& texts, bool add_special_tokens) {
            std::vector<Encoding> es;
            {
              py::gil_scoped_release release;
              es = unwrap(t.encode_batch(texts, add_special_tokens, &ThreadPool::global()));
            }
            py::list out;
            for (const Encoding& e : es) out.append(encoding_dict(e));
            return out;
          },
          py::arg("texts"), py::arg("add_special_tokens") = true)
      .def(
          "decode",
          [](const Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special_tokens) {
            return unwrap(t.decode(ids, skip_special_tokens));
          },
          py::arg("ids"), py::arg("skip_special_tokens") = false, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size)
      .def_property_readonly("id_limit", &Tokenizer::id_limit)
      .def("token_to_id", [](const Tokenizer& t, const std::string& s) { return t.token_to_id(s); })
      .def("id_to_token", &Tokenizer::id_to_token)
      .def("is_special_id", &Tokenizer::is_special_id)
      .def_property_readonly("bos_token_id", &Tokenizer::bos_token_id)
      .def_property_readonly("eos_token_id", &Tokenizer::eos_token_id)
      .def_property_readonly("bos_token", &Tokenizer::bos_token)
      .def_property_readonly("eos_token", &Tokenizer::eos_token)
      .def_property_readonly("tokenizer_config_json", [](const Tokenizer& t) { return t.tokenizer_config().dump(); })
      .def_property_readonly("chat_templates", &Tokenizer::chat_templates);

  py::class_<IncrementalDetokenizer>(m, "_IncrementalDetokenizer")
      .def(py::init<std::shared_ptr<const Tokenizer>, bool, const std::vector<int32_t>&>(), py::arg("tokenizer"),
           py::arg("skip_special_tokens") = false, py::arg("context") = std::vector<int32_t>{})
      .def("push", &IncrementalDetokenizer::push, py::arg("id"))
      .def("flush", &IncrementalDetokenizer::flush);

  // messages and extras arrive as JSON text (json.dumps keeps their key order).
  m.def(
      "_render_chat_template",
      [](const std::string& source, const std::string& bos, const std::string& eos, const std::string& messages_json,
         bool add_generation_prompt, const std::string& extras_json) {
        const tok::ChatTemplate tmpl = unwrap(tok::ChatTemplate::create(source, bos, eos));
        const auto messages = nlohmann::ordered_json::parse(messages_json);
        const auto extras = nlohmann::ordered_json::parse(extras_json);
        return unwrap(tmpl.apply(messages, add_generation_prompt, extras));
      },
      py::call_guard<py::gil_scoped_release>());
}

}  // namespace loom::python
