#include "loom/runtime/op_profile.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <tuple>

namespace loom::runtime {

OpProfile& OpProfile::global() {
  static OpProfile p;
  return p;
}

std::string OpProfile::generic_scope(std::string_view scope) {
  std::string out;
  out.reserve(scope.size());
  for (size_t i = 0; i < scope.size();) {
    if (std::isdigit(static_cast<unsigned char>(scope[i]))) {
      while (i < scope.size() && std::isdigit(static_cast<unsigned char>(scope[i]))) ++i;
      out.push_back('*');
    } else {
      out.push_back(scope[i++]);
    }
  }
  return out;
}

std::string OpProfile::rows_class(int64_t rows) {
  if (rows <= 1) return "1";
  if (rows <= 64) return "2-64";
  if (rows <= 256) return "65-256";
  return ">256";
}

void OpProfile::add(std::string_view op, std::string_view scope, int64_t rows, double seconds) {
  std::string s = generic_scope(scope);
  std::string r = rows_class(rows);
  std::string key;
  key.reserve(op.size() + s.size() + r.size() + 2);
  key.append(op).push_back('\n');
  key.append(s).push_back('\n');
  key.append(r);
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entries_[key];
  if (e.calls == 0) {
    e.op = std::string(op);
    e.scope = std::move(s);
    e.rows = std::move(r);
  }
  ++e.calls;
  e.seconds += seconds;
}

std::vector<OpProfile::Entry> OpProfile::entries() const {
  std::vector<Entry> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.reserve(entries_.size());
    for (const auto& [k, e] : entries_) out.push_back(e);
  }
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) {
    if (a.seconds != b.seconds) return a.seconds > b.seconds;
    return std::tie(a.op, a.scope, a.rows) < std::tie(b.op, b.scope, b.rows);
  });
  return out;
}

double OpProfile::total_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  double t = 0;
  for (const auto& [k, e] : entries_) t += e.seconds;
  return t;
}

void OpProfile::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
}

std::string OpProfile::table(size_t max_rows) const {
  const std::vector<Entry> all = entries();
  double total = 0;
  for (const Entry& e : all) total += e.seconds;
  std::string out = "| op | scope | rows | calls | seconds | share |\n|---|---|---|---|---|---|\n";
  char line[512];
  double rest = 0;
  int64_t rest_calls = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const Entry& e = all[i];
    if (i >= max_rows) {
      rest += e.seconds;
      rest_calls += e.calls;
      continue;
    }
    std::snprintf(line, sizeof(line), "| %s | %s | %s | %lld | %.3f | %.1f%% |\n", e.op.c_str(),
                  e.scope.empty() ? "-" : e.scope.c_str(), e.rows.c_str(), static_cast<long long>(e.calls), e.seconds,
                  total > 0 ? 100.0 * e.seconds / total : 0.0);
    out += line;
  }
  if (rest_calls > 0) {
    std::snprintf(line, sizeof(line), "| (%zu more) | | | %lld | %.3f | %.1f%% |\n", all.size() - max_rows,
                  static_cast<long long>(rest_calls), rest, total > 0 ? 100.0 * rest / total : 0.0);
    out += line;
  }
  std::snprintf(line, sizeof(line), "| total | | | | %.3f | |\n", total);
  out += line;
  return out;
}

}  // namespace loom::runtime
