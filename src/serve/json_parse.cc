#include "serve/json_parse.h"

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace loom::serve {

namespace {

using ojson = nlohmann::ordered_json;

class LinearBuilder : public nlohmann::json_sax<ojson> {
 public:
  ojson result;

  bool null() override { return put(nullptr); }
  bool boolean(bool v) override { return put(v); }
  bool number_integer(number_integer_t v) override { return put(v); }
  bool number_unsigned(number_unsigned_t v) override { return put(v); }
  bool number_float(number_float_t v, const string_t&) override { return put(v); }
  bool string(string_t& v) override { return put(std::move(v)); }
  bool binary(binary_t& v) override { return put(ojson::binary(std::move(v))); }
  bool start_object(std::size_t) override {
    ojson* o = put(ojson::object());
    open_.push_back({o, {}, {}});
    return true;
  }
  bool key(string_t& k) override {
    open_.back().key = std::move(k);
    return true;
  }
  bool end_object() override {
    open_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    ojson* a = put(ojson::array());
    open_.push_back({a, {}, {}});
    return true;
  }
  bool end_array() override {
    open_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  struct Open {
    ojson* value;
    std::unordered_map<std::string, size_t> index;  // key → its place (objects only)
    std::string key;                                // the key whose value comes next
  };

  // Places a value where the parser is (the root, the next array element, or
  // the value of the pending key) and returns where it went.
  template <typename V>
  ojson* put(V&& v) {
    if (open_.empty()) {
      result = ojson(std::forward<V>(v));
      return &result;
    }
    Open& top = open_.back();
    if (top.value->is_array()) {
      auto& items = top.value->get_ref<ojson::array_t&>();
      items.emplace_back(std::forward<V>(v));
      return &items.back();
    }
    auto& members = top.value->get_ref<ojson::object_t&>();
    auto [at, fresh] = top.index.try_emplace(top.key, members.size());
    if (!fresh) {  // a repeated key: its last value, in its first place
      auto slot = members.begin() + static_cast<std::ptrdiff_t>(at->second);
      slot->second = ojson(std::forward<V>(v));
      return &slot->second;
    }
    // The vector's own emplace_back: ordered_map::emplace would search the keys.
    members.emplace_back(std::move(top.key), ojson(std::forward<V>(v)));
    return &members.back().second;
  }

  std::vector<Open> open_;
};

}  // namespace

std::optional<nlohmann::ordered_json> parse_json(std::string_view text) {
  LinearBuilder builder;
  if (!ojson::sax_parse(text, &builder)) return std::nullopt;
  return std::move(builder.result);
}

}  // namespace loom::serve
