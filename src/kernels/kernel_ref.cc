#include "loom/kernels/kernel_ref.h"

#include <cctype>

namespace loom::kernels {

namespace {

bool valid_repo_segment(std::string_view s) {
  if (s.empty() || s == "." || s == "..") return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  return true;
}

bool valid_identifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

}  // namespace

Result<KernelRef> KernelRef::parse(std::string_view text) {
  std::string quoted(1, '\'');
  quoted.append(text).push_back('\'');
  const auto colon = text.find(':');
  if (colon == std::string_view::npos)
    return invalid_argument("malformed kernel repo string " + quoted + ": expected 'repo:Name' or 'owner/repo:Name'");
  if (text.find(':', colon + 1) != std::string_view::npos)
    return invalid_argument("malformed kernel repo string " + quoted + ": more than one ':'");
  const std::string_view repo = text.substr(0, colon);
  const std::string_view name = text.substr(colon + 1);
  if (repo.empty()) return invalid_argument("malformed kernel repo string " + quoted + ": empty repo");
  int segments = 0;
  for (size_t start = 0;;) {
    const auto slash = repo.find('/', start);
    const std::string_view seg = repo.substr(start, slash == std::string_view::npos ? repo.npos : slash - start);
    if (!valid_repo_segment(seg))
      return invalid_argument("malformed kernel repo string " + quoted + ": repo segment '" + std::string(seg) +
                              "' must be [A-Za-z0-9._-]+ and not '.' or '..'");
    ++segments;
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  if (segments > 2)
    return invalid_argument("malformed kernel repo string " + quoted + ": repo must be 'name' or 'owner/name'");
  if (!valid_identifier(name))
    return invalid_argument("malformed kernel repo string " + quoted + ": kernel name '" + std::string(name) +
                            "' is not an identifier");
  KernelRef r;
  r.repo = std::string(repo);
  r.name = std::string(name);
  return r;
}

Status KernelRef::validate() const {
  if (version && revision) return invalid_argument(id() + ": give either version or revision, not both");
  if (version && *version < 1) return invalid_argument(id() + ": version must be ≥ 1, got " + std::to_string(*version));
  if (revision && revision->empty()) return invalid_argument(id() + ": empty revision");
  return Status::Ok();
}

std::string KernelRef::to_string() const {
  std::string meta;
  if (version) meta += "version " + std::to_string(*version);
  if (revision) meta += (meta.empty() ? "" : ", ") + std::string("revision ") + *revision;
  if (trust_remote_code) meta += (meta.empty() ? "" : ", ") + std::string("trust_remote_code");
  return meta.empty() ? id() : id() + " (" + meta + ")";
}

}  // namespace loom::kernels
