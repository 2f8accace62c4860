"""scripts/check-layers against small fake trees and tables: it must fail on an edge
its table does not allow (naming file, line and edge) and pass a tree that keeps to it."""
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "check-layers")

TABLE = textwrap.dedent("""\
    # design

    ## Layers and who may include whom

    | folder | owns | may use |
    |---|---|---|
    | `core/` | basics | std, nlohmann_json, Highway |
    | `graph/` | IR | core |
    | `runtime/` | executor; `cpu/` kernels | core, graph |
    | `export/` | exporters | core, graph |
    | `batching/` | manager | everything above except export |
    | `serve/` | server | batching and below, export |
    | `portable/` | its own runtime | nothing of loom |
    | `cli/`, `python/` | front ends | everything |

    Public headers live in `include/loom/<layer>/`.

    ## Next section

    | folder | may use |
    |---|---|
    | `ignored/` | everything |
    """)


class CheckLayersTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = os.path.join(self.tmp.name, "repo")
        self.design = os.path.join(self.tmp.name, "shared", "DESIGN.md")
        self.write(self.design, TABLE)
        # A tree that keeps to the table, including through subfolders (runtime/cpu).
        self.write_source("include/loom/core/tensor.h", "#include <vector>\n")
        self.write_source("include/loom/graph/graph.h", '#include "loom/core/tensor.h"\n')
        self.write_source("src/runtime/cpu/gemm.h", "")
        self.write_source("src/runtime/cpu/gemm.cc", '#include "runtime/cpu/gemm.h"\n#include "gemm.h"\n')
        self.write_source("include/loom/runtime/cpu/matmul.h", '#include "loom/graph/graph.h"\n')
        self.write_source("src/export/onnx.cc", '#include "loom/graph/graph.h"\n')
        self.write_source("src/batching/manager.cc",
                          '#include "loom/runtime/cpu/matmul.h"\n#include <loom/core/tensor.h>\n')
        self.write_source("src/serve/server.cc", '#include "loom/batching/m.h"\n#include "loom/export/e.h"\n'
                                                  '#include "loom/graph/graph.h"\n')
        self.write_source("src/portable/src/program.cc", '#include "kernels.h"\n')
        self.write_source("src/cli/main.cc", '#include "loom/serve/s.h"\n#include "loom/portable/p.h"\n')

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, path, text):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    def write_source(self, relative, text):
        self.write(os.path.join(self.root, relative), text)

    def run_check(self, env_ci=None, design=None):
        env = dict(os.environ)
        env.pop("CI", None)
        if env_ci is not None:
            env["CI"] = env_ci
        return subprocess.run([sys.executable, SCRIPT, "--root", self.root, "--design",
                               design or os.path.join("..", "shared", "DESIGN.md")],
                              capture_output=True, text=True, env=env)

    def assert_fails_with(self, *fragments):
        result = self.run_check()
        self.assertEqual(result.returncode, 1, result.stderr)
        for fragment in fragments:
            self.assertIn(fragment, result.stderr)
        return result

    def test_clean_tree_passes(self):
        result = self.run_check()
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stderr, "")

    def test_forbidden_public_include_names_file_line_and_edge(self):
        self.write_source("src/graph/builder.cc", '#include <string>\n\n#include "loom/runtime/cpu/matmul.h"\n')
        self.assert_fails_with("src/graph/builder.cc:3:", "graph -> runtime")

    def test_forbidden_include_in_a_public_header(self):
        self.write_source("include/loom/core/bad.h", '#include "loom/graph/graph.h"\n')
        self.assert_fails_with("include/loom/core/bad.h:1:", "core -> graph")

    def test_everything_above_except_leaves_out_the_exception(self):
        self.write_source("src/batching/export_use.cc", '#include "loom/export/e.h"\n')
        self.assert_fails_with("src/batching/export_use.cc:1:", "batching -> export")

    def test_and_below_does_not_reach_rows_outside_it(self):
        self.write_source("src/serve/portable_use.cc", '#include "loom/portable/p.h"\n')
        self.assert_fails_with("serve -> portable")

    def test_nothing_of_loom(self):
        self.write_source("src/portable/src/uses_core.cc", '#include "loom/core/tensor.h"\n')
        self.assert_fails_with("portable -> core")

    def test_private_sources_of_an_allowed_layer_are_still_forbidden(self):
        self.write_source("src/batching/reach.cc", '#include "runtime/cpu/gemm.h"\n')
        self.assert_fails_with("src/batching/reach.cc:1:", "reaches runtime's private sources")

    def test_relative_path_into_another_layer(self):
        self.write_source("src/batching/relative.cc", '#include "../runtime/cpu/gemm.h"\n')
        self.assert_fails_with("src/batching/relative.cc:1:", "reaches runtime's private sources")

    def test_folder_without_a_row(self):
        self.write_source("src/ignored/x.cc", "")
        self.assert_fails_with("src/ignored/", "no row")

    def test_missing_design_warns_outside_ci_and_fails_in_ci(self):
        missing = os.path.join(self.tmp.name, "nowhere", "DESIGN.md")
        outside = self.run_check(design=missing)
        self.assertEqual(outside.returncode, 0)
        self.assertIn("not found", outside.stderr)
        in_ci = self.run_check(env_ci="true", design=missing)
        self.assertEqual(in_ci.returncode, 1)
        self.assertIn("not found", in_ci.stderr)

    def test_a_design_without_the_table_is_an_error(self):
        self.write(self.design, "# design\n\nno table\n")
        result = self.run_check()
        self.assertEqual(result.returncode, 1)
        self.assertIn("Layers and who may include whom", result.stderr)


if __name__ == "__main__":
    unittest.main()
