// The exporters' registries: patches live exactly as long as one export on one
// thread (restored after success, after an error, nested without leaking);
// node fixes run once per node, first match wins, looked up by op; program
// fixes run in order and name themselves in errors.
#include "loom/export/registries.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>

#include "loom/export/exported_program.h"

namespace loom::exporting {
namespace {

using Twice = int(int);
graph::PatchPoint<Twice> twice("test.registries.twice", [](int x) { return 2 * x; });
graph::PatchPoint<Twice> negate("test.registries.negate", [](int x) { return -x; });
graph::PatchPoint<double(double)> halve("test.registries.halve", [](double x) { return x / 2; });

// Each test registers under its own backend name and drops it at the end.
struct Backend {
  std::string name;
  explicit Backend(std::string n) : name(std::move(n)) {}
  ~Backend() { unregister_backend(name); }
};

TEST(PatchScope, ReplacesOnlyOnThisThreadAndOnlyWhileItLives) {
  {
    graph::PatchScope scope;
    ASSERT_TRUE(scope.install<Twice>("test.registries.twice", [](const std::function<Twice>& orig) {
                       return std::function<Twice>([orig](int x) { return orig(x) + 1; });
                     }).ok());
    EXPECT_EQ(twice(5), 11);  // the factory wrapped the original
    int other = 0;
    std::thread t([&] { other = twice(5); });
    t.join();
    EXPECT_EQ(other, 10);  // another thread is not exporting
    {
      graph::PatchScope inner;
      ASSERT_TRUE(inner.install<Twice>("test.registries.twice", [](const std::function<Twice>&) {
                         return std::function<Twice>([](int x) { return 100 * x; });
                       }).ok());
      EXPECT_EQ(twice(5), 500);
    }
    EXPECT_EQ(twice(5), 11);  // the inner scope left the outer one's patch in place
  }
  EXPECT_EQ(twice(5), 10);
  graph::PatchScope scope;
  EXPECT_EQ(scope.install<Twice>("test.registries.no_such_point", nullptr).code(), ErrorCode::kNotFound);
  EXPECT_EQ(scope.install<int(long)>("test.registries.twice", nullptr).code(), ErrorCode::kInvalidArgument);
}

TEST(ApplyPatches, SkipsUnknownPathsOrFailsInStrictModeAndAlwaysRestores) {
  Backend b("test_patches");
  int factory_calls = 0;
  register_patch<Twice>(b.name, "plus_one", {"test.registries.twice", "test.registries.negate", "models.nope.forward"},
                        [&](std::function<Twice> orig) {
                          ++factory_calls;
                          return std::function<Twice>([orig](int x) { return orig(x) + 1; });
                        });
  {
    auto applied = apply_patches(b.name, /*strict=*/false).value();
    EXPECT_EQ(factory_calls, 2);  // one factory shared by two paths
    EXPECT_EQ(twice(3), 7);
    EXPECT_EQ(negate(3), -2);
    EXPECT_EQ(applied->skipped, std::vector<std::string>{"models.nope.forward"});
    EXPECT_EQ(applied->applied.size(), 2u);
  }
  EXPECT_EQ(twice(3), 6);
  EXPECT_EQ(negate(3), -3);

  Result<std::unique_ptr<AppliedPatches>> strict = apply_patches(b.name, /*strict=*/true);
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(strict.status().message().find("models.nope.forward"), std::string::npos) << strict.status().to_string();
  EXPECT_EQ(twice(3), 6);  // what was installed before the failure is gone again

  // An export that throws half-way restores the originals too.
  auto export_that_throws = [&] {
    auto applied = apply_patches(b.name, false).value();
    EXPECT_EQ(twice(1), 3);
    throw std::runtime_error("lowering failed");
  };
  EXPECT_THROW(export_that_throws(), std::runtime_error);
  EXPECT_EQ(twice(1), 2);

  // Nested exports (an export inside an export) do not leak into each other:
  // each builds its replacements from the original, as if it ran alone.
  Backend inner_backend("test_patches_inner");
  register_patch<Twice>(inner_backend.name, "times_ten", {"test.registries.twice"},
                        [](std::function<Twice> orig) { return std::function<Twice>([orig](int x) { return 10 * orig(x); }); });
  {
    auto outer = apply_patches(b.name, false).value();
    {
      auto inner = apply_patches(inner_backend.name, false).value();
      EXPECT_EQ(twice(1), 20);  // 10 · (2 · 1): not wrapped around the outer export's patch
      EXPECT_EQ(negate(1), 0);  // the outer export's other patch is still there
    }
    EXPECT_EQ(twice(1), 3);
  }
  EXPECT_EQ(twice(1), 2);

  Backend wrong("test_patches_wrong_type");
  register_patch<double(double)>(wrong.name, "bad", {"test.registries.twice"},
                                 [](std::function<double(double)> f) { return f; });
  Result<std::unique_ptr<AppliedPatches>> bad = apply_patches(wrong.name, false);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
}

graph::Graph mul_chain() {
  graph::Graph g;
  const int t = g.add_symbol("tokens");
  const graph::ValueId x = g.add_input("x", DType::kF32, {graph::Dim::sym(t), graph::Dim::fixed(4)});
  const graph::ValueId m1 = g.add_node("mul", {x, x}, {}, "model.a")[0];
  const graph::ValueId s = g.add_node("silu", {m1}, {}, "model.a")[0];
  const graph::ValueId m2 = g.add_node("mul", {s, x}, {}, "model.b")[0];
  g.mark_output("y", m2);
  return g;
}

TEST(NodeFixes, FirstMatchingFixConsumesEachNodeOnceAndTheGraphStaysOrdered) {
  Backend b("test_node_fixes");
  std::atomic<int> mul_to_add_calls{0}, never_calls{0}, silu_calls{0};
  register_node_fix(b.name, "mul", "mul_to_add", [&](graph::Graph& g, graph::NodeId id) {
    ++mul_to_add_calls;
    const graph::Node n = g.node(id);
    const graph::ValueId sum = g.add_node("add", n.inputs, {}, n.scope)[0];
    g.replace_uses(n.outputs[0], sum);
    return true;
  });
  register_node_fix(b.name, "mul", "never", [&](graph::Graph&, graph::NodeId) {
    ++never_calls;
    return true;
  });
  register_node_fix(b.name, "silu", "declines", [&](graph::Graph&, graph::NodeId) {
    ++silu_calls;
    return false;
  });
  graph::Graph g = mul_chain();
  const FixReport r = run_node_fixes(b.name, g);
  EXPECT_EQ(mul_to_add_calls, 2);  // once per mul node, not for the adds it created
  EXPECT_EQ(never_calls, 0);       // the first fix consumed both
  EXPECT_EQ(silu_calls, 1);        // looked up by op: called for the silu node only
  EXPECT_EQ(r.rewrites.at("mul_to_add"), 2);
  EXPECT_EQ(r.rewrites.count("declines"), 0u);
  EXPECT_EQ(r.dead_nodes_removed, 2);
  std::vector<std::string> ops;
  for (const graph::Node& n : g.nodes()) ops.push_back(n.op);
  EXPECT_EQ(ops, (std::vector<std::string>{"add", "silu", "add"}));
  // Every node comes after the producers of its inputs.
  for (const graph::Node& n : g.nodes())
    for (graph::ValueId in : n.inputs)
      if (g.value(in).kind == graph::ValueKind::kNode) EXPECT_LT(g.value(in).producer, n.id);
  EXPECT_EQ(g.value(g.output("y")).producer, 2);
}

TEST(ProgramFixes, RunInOrderAndNameThemselvesInErrors) {
  Backend b("test_program_fixes");
  ExportedProgram p;
  register_program_fix(b.name, "first", [](ExportedProgram& x) {
    x.metadata["order"] += "1";
    return Status::Ok();
  });
  register_program_fix(b.name, "second", [](ExportedProgram& x) {
    x.metadata["order"] += "2";
    return Status::Ok();
  });
  EXPECT_EQ(run_program_fixes(b.name, p).value(), (std::vector<std::string>{"first", "second"}));
  EXPECT_EQ(p.metadata["order"], "12");
  register_program_fix(b.name, "fails", [](ExportedProgram&) { return invalid_argument("no dynamic batch here"); });
  Result<std::vector<std::string>> r = run_program_fixes(b.name, p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("program fix 'fails'"), std::string::npos) << r.status().to_string();
  EXPECT_NE(r.status().message().find("no dynamic batch"), std::string::npos);
}

}  // namespace
}  // namespace loom::exporting
