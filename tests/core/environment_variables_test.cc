// Every LOOM_* environment variable the code, scripts and tests read is in README's one table
// (the benchmark programs' LOOM_BENCH_* knobs in bench/README.md's), and every variable the
// table names is still read somewhere: the table cannot fall behind the code either way.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace loom {
namespace environment_variables {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Names read from the environment: getenv("X") in C++, os.environ.get("X") / os.environ["X"]
// in Python, ${X / $X in shell, process.env.X in JavaScript.
std::set<std::string> names_read() {
  static const std::regex read(
      R"re(getenv\("(LOOM_[A-Z0-9_]+)"|environ(?:\.get\(|\[)"(LOOM_[A-Z0-9_]+)"|env_int\("(LOOM_[A-Z0-9_]+)"|\$\{?(LOOM_[A-Z0-9_]+)|process\.env\.(LOOM_[A-Z0-9_]+))re");
  std::set<std::string> names;
  const fs::path root = LOOM_SOURCE_DIR;
  for (const char* dir : {"src", "include", "bench", "scripts", "tests", "models", "python", ".ci"}) {
    if (!fs::exists(root / dir)) continue;
    for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
      if (!e.is_regular_file()) continue;
      const std::string ext = e.path().extension().string();
      const bool script = ext.empty() || ext == ".sh" || ext == ".py" || ext == ".js";
      if (ext != ".cc" && ext != ".h" && !script) continue;
      if (e.path().filename() == "environment_variables_test.cc") continue;
      const std::string text = slurp(e.path());
      for (std::sregex_iterator it(text.begin(), text.end(), read), end; it != end; ++it)
        for (size_t g = 1; g < it->size(); ++g)
          if ((*it)[g].matched) names.insert((*it)[g].str());
    }
  }
  return names;
}

// Names in the first column of a markdown table, as `NAME` (several may share a row).
std::set<std::string> names_in_table(const std::string& markdown) {
  static const std::regex row(R"(\n\| ([^|]*)\|)");
  static const std::regex name("`(LOOM_[A-Z0-9_]+)`");
  std::set<std::string> names;
  for (std::sregex_iterator it(markdown.begin(), markdown.end(), row), end; it != end; ++it) {
    const std::string cell = (*it)[1].str();
    for (std::sregex_iterator n(cell.begin(), cell.end(), name), nend; n != nend; ++n) names.insert((*n)[1].str());
  }
  return names;
}

bool is_bench_knob(const std::string& name) { return name.rfind("LOOM_BENCH_", 0) == 0; }

TEST(EnvironmentVariables, EveryOneReadIsInTheReadmeTableAndEveryOneThereIsRead) {
  const fs::path root = LOOM_SOURCE_DIR;
  const std::set<std::string> read = names_read();
  const std::set<std::string> readme = names_in_table(slurp(root / "README.md"));
  const std::set<std::string> bench = names_in_table(slurp(root / "bench" / "README.md"));
  ASSERT_GT(read.size(), 10u) << "the scan found too few reads to be looking at the sources";
  for (const std::string& name : read) {
    if (is_bench_knob(name))
      EXPECT_TRUE(bench.count(name)) << name << " is read but not in bench/README.md's table of knobs";
    else
      EXPECT_TRUE(readme.count(name)) << name << " is read but not in README.md's table of environment variables";
  }
  for (const std::string& name : readme) EXPECT_TRUE(read.count(name)) << "README.md lists " << name << ", which nothing reads";
  for (const std::string& name : bench) {
    if (is_bench_knob(name)) EXPECT_TRUE(read.count(name)) << "bench/README.md lists " << name << ", which nothing reads";
  }
}

}  // namespace environment_variables
}  // namespace loom
