// LOOM_FORCE_ISA is read once, when a process starts: a test of what it reaches
// runs its own binary again with the variable set, filtered to one child suite.
#pragma once

#include <unistd.h>

#include <array>
#include <cstdio>
#include <string>

namespace loom::testing {

// Runs this binary with LOOM_FORCE_ISA=isa (and LOOM_TEST_EXPECTED_ISA=isa, for the
// child to check against) on the tests of `child_suite`; "" when its one test
// passed, else the child's output.
inline std::string run_child_with_forced_isa(const std::string& isa, const std::string& child_suite) {
  std::array<char, 4096> exe{};
  const ssize_t n = readlink("/proc/self/exe", exe.data(), exe.size() - 1);
  if (n <= 0) return "cannot read /proc/self/exe";
  const std::string cmd = "LOOM_FORCE_ISA=" + isa + " LOOM_TEST_EXPECTED_ISA=" + isa + " '" +
                          std::string(exe.data(), static_cast<size_t>(n)) + "' --gtest_filter=" + child_suite +
                          ".* 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return "popen failed";
  std::string out;
  std::array<char, 512> buf{};
  while (fgets(buf.data(), static_cast<int>(buf.size()), pipe)) out += buf.data();
  const int status = pclose(pipe);
  return status == 0 && out.find("[  PASSED  ] 1 test") != std::string::npos ? "" : out;
}

}  // namespace loom::testing
