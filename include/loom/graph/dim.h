// Symbolic dimensions: a dimension is either a constant or a named symbol
// ("tokens", "sequences") bound to a value when the graph runs. One graph built
// per model serves every step; exporters keep the symbols as dynamic axes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::graph {

struct Dim {
  int64_t value = 0;   // the size when static
  int symbol = -1;     // index into Graph::symbols() when symbolic

  static Dim fixed(int64_t v) { return Dim{v, -1}; }
  static Dim sym(int s) { return Dim{0, s}; }
  bool is_static() const { return symbol < 0; }
  bool operator==(const Dim& o) const { return symbol == o.symbol && (symbol >= 0 || value == o.value); }
  bool operator!=(const Dim& o) const { return !(*this == o); }
};

using SymShape = std::vector<Dim>;

}  // namespace loom::graph
