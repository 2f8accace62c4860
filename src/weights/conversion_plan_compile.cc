// ConversionPlan::compile: rules × checkpoint headers × expected parameters →
// resolved groups, with every check done before any tensor byte is read.
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "loom/weights/conversion_plan.h"
#include "loom/io/quoted.h"
#include "loom/weights/weight_pattern.h"

namespace loom {
namespace {

using io::squote;

std::string label_of(const std::string& rules_name, int index, const WeightRule& rule) {
  return rules_name + " #" + std::to_string(index) + " " + describe(rule);
}

struct CompiledRenaming {
  int index;
  WeightPattern glob;
  const WeightRenaming* rule;
  size_t matches = 0;
};

struct CompiledConverter {
  int index;
  const WeightConverter* rule;
  std::vector<WeightPattern> sources, targets;
  int shared = 0;  // stars paired between sources and targets
  bool source_lists = false, target_lists = false;
};

struct Item {
  std::string list_key;  // joined list captures, for ordering
  const SourceTensor* tensor;
  std::string renamed;
};

struct Instance {
  PatternMatch match;  // prefix, shared captures, suffix
  std::vector<std::vector<Item>> slots;
};

std::string join_caps(const std::vector<std::string>& caps, size_t begin, size_t end) {
  std::string s;
  for (size_t i = begin; i < end; ++i) s += (i > begin ? "." : "") + caps[i];
  return s;
}

// Shapes just after op `k` of `ops`, computed backwards from `targets` through
// ops k+1..end (each reversed). Fails when an op there cannot be run backwards
// without knowing its sizes.
Result<ShapeBundle> shapes_after(const std::vector<ConversionOp>& ops, size_t k, ShapeBundle targets) {
  for (size_t i = ops.size(); i-- > k + 1;) {
    const ConversionOp& op = ops[i];
    if (op.kind == ConversionOpKind::kConcatenate || (op.kind == ConversionOpKind::kChunk && op.sizes.empty()))
      return invalid_argument("cannot run " + op.describe() + " backwards from the targets without sizes");
    LOOM_ASSIGN_OR_RETURN(targets, infer_shapes(op.reverse(), targets));
  }
  return targets;
}

bool same_shapes(const ShapeBundle& a, const ShapeBundle& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].items != b[i].items) return false;
  return true;
}

}  // namespace

SourceIndex SourceIndex::from_checkpoint(const Checkpoint& checkpoint) {
  SourceIndex index;
  index.sharded = checkpoint.sharded();
  if (index.sharded) index.index_file = std::filesystem::path(checkpoint.source()).filename().string();
  if (const io::GgufFile* gguf = checkpoint.gguf()) {
    const std::string fname = std::filesystem::path(gguf->path()).filename().string();
    index.files.push_back(fname);
    for (const io::GgufTensorInfo& t : gguf->tensors()) index.tensors.push_back({t.name, t.dtype, t.shape, fname});
    return index;
  }
  for (const auto& file : checkpoint.files()) {
    const std::string fname = std::filesystem::path(file->path()).filename().string();
    index.files.push_back(fname);
    index.metadata[fname] = file->metadata();
    for (const TensorInfo& info : file->tensors()) {
      // A shard may hold tensors its index does not map to it; the checkpoint ignores those.
      if (checkpoint.file_of(info.name) != file.get()) continue;
      index.tensors.push_back({info.name, info.dtype, info.shape, fname});
    }
  }
  return index;
}

void SourceIndex::add(std::string name, DType dtype, Shape shape, std::string file) {
  if (std::find(files.begin(), files.end(), file) == files.end()) files.push_back(file);
  tensors.push_back({std::move(name), dtype, std::move(shape), std::move(file)});
}

Result<ConversionPlan> ConversionPlan::compile(const WeightRules& rules, const SourceIndex& source,
                                               const ExpectedParams& expected, const CompileOptions& options) {
  ConversionPlan plan;
  plan.source_ = source;
  const auto rule_label = [&options](int index, const WeightRule& rule) {
    return label_of(options.rules_name, index, rule);
  };
  const std::string& what = options.sources_name;
  const auto hint = [&options](const std::string& pattern) {
    return options.unmatched_hint ? options.unmatched_hint(pattern) : std::string();
  };

  // 1. Parse every rule.
  std::vector<CompiledRenaming> renamings;
  std::vector<CompiledConverter> converters;
  for (size_t ri = 0; ri < rules.size(); ++ri) {
    const int index = static_cast<int>(ri);
    const std::string label = rule_label(index, rules[ri]);
    if (const auto* rn = std::get_if<WeightRenaming>(&rules[ri])) {
      auto p = WeightPattern::parse(rn->source);
      if (!p.ok()) return p.status().with_context(label);
      auto t = WeightPattern::parse(rn->target);
      if (!t.ok()) return t.status().with_context(label);
      if (t->num_stars() > p->num_stars()) return invalid_argument(label + ": target has more stars than the source");
      renamings.push_back(CompiledRenaming{index, std::move(p).value(), rn});
      continue;
    }
    const auto& cv = std::get<WeightConverter>(rules[ri]);
    CompiledConverter c{index, &cv, {}, {}, 0, false, false};
    if (cv.sources.empty() || cv.targets.empty()) return invalid_argument(label + ": needs sources and targets");
    if (cv.operations.empty() && (cv.sources.size() != 1 || cv.targets.size() != 1))
      return invalid_argument(label + ": several sources or targets need operations");
    for (const auto& s : cv.sources) {
      auto p = WeightPattern::parse(s);
      if (!p.ok()) return p.status().with_context(label);
      c.sources.push_back(std::move(p).value());
    }
    for (const auto& s : cv.targets) {
      auto p = WeightPattern::parse(s);
      if (!p.ok()) return p.status().with_context(label);
      c.targets.push_back(std::move(p).value());
    }
    const auto stars = [](const std::vector<WeightPattern>& ps) {
      std::set<int> n;
      for (const auto& p : ps) n.insert(p.num_stars());
      return n;
    };
    const std::set<int> ss = stars(c.sources), ts = stars(c.targets);
    if (ss.size() != 1 || ts.size() != 1)
      return invalid_argument(label + ": all sources (and all targets) must have the same number of stars");
    c.shared = std::min(*ss.begin(), *ts.begin());
    c.source_lists = *ss.begin() > c.shared;
    c.target_lists = *ts.begin() > c.shared;
    converters.push_back(std::move(c));
  }

  // 2. Renamings, chained in order.
  std::vector<std::string> renamed(source.tensors.size());
  std::map<std::string, size_t> by_renamed;
  std::vector<const CompiledRenaming*> renamed_by(source.tensors.size(), nullptr);
  for (size_t i = 0; i < source.tensors.size(); ++i) {
    std::string key = source.tensors[i].name;
    const CompiledRenaming* last = nullptr;
    for (auto& r : renamings) {
      auto m = r.glob.search(key);
      if (!m) continue;
      auto target = WeightPattern::parse(r.rule->target);
      key = join_key(m->prefix, target->substitute(m->captures), m->suffix);
      ++r.matches;
      last = &r;
    }
    renamed_by[i] = last;
    auto [it, inserted] = by_renamed.emplace(key, i);
    if (!last) last = renamed_by[it->second];
    if (!inserted)
      return invalid_argument((last ? rule_label(last->index, rules[last->index]) : std::string("renaming")) +
                              ": " + what + "s " + squote(source.tensors[it->second].name) + " and " +
                              squote(source.tensors[i].name) + " both become " + squote(key));
    renamed[i] = std::move(key);
  }

  // 3. Converter matching and grouping by instance (prefix, shared captures, suffix).
  std::vector<std::map<std::string, Instance>> instances(converters.size());
  std::vector<size_t> pass_through;
  for (size_t i = 0; i < source.tensors.size(); ++i) {
    const std::string& key = renamed[i];
    int hit_conv = -1, hit_pat = -1;
    PatternMatch hit;
    for (size_t c = 0; c < converters.size(); ++c) {
      for (size_t p = 0; p < converters[c].sources.size(); ++p) {
        auto m = converters[c].sources[p].search(key);
        if (!m) continue;
        if (hit_conv == static_cast<int>(c))
          return invalid_argument(rule_label(converters[c].index, rules[converters[c].index]) + ": " + what + " " +
                                  squote(key) + " consumed twice (by source patterns " +
                                  squote(converters[c].sources[hit_pat].text()) + " and " +
                                  squote(converters[c].sources[p].text()) + ")");
        if (hit_conv >= 0)
          return invalid_argument("conflicting rules for " + what + " " + squote(key) + ": " +
                                  rule_label(converters[hit_conv].index, rules[converters[hit_conv].index]) + " and " +
                                  rule_label(converters[c].index, rules[converters[c].index]));
        hit_conv = static_cast<int>(c);
        hit_pat = static_cast<int>(p);
        hit = std::move(*m);
      }
    }
    if (hit_conv < 0) {
      pass_through.push_back(i);
      continue;
    }
    const CompiledConverter& cc = converters[hit_conv];
    PatternMatch inst{hit.prefix, {hit.captures.begin(), hit.captures.begin() + cc.shared}, hit.suffix};
    std::string inst_key = inst.prefix + '\x1f' + join_caps(inst.captures, 0, inst.captures.size()) + '\x1f' + inst.suffix;
    Instance& in = instances[hit_conv][inst_key];
    if (in.slots.empty()) {
      in.match = inst;
      in.slots.resize(cc.sources.size());
    }
    in.slots[hit_pat].push_back({join_caps(hit.captures, cc.shared, hit.captures.size()), &source.tensors[i], key});
  }

  // Rules that matched nothing.
  for (const auto& r : renamings)
    if (r.matches == 0 && !r.rule->optional)
      return not_found(rule_label(r.index, rules[r.index]) + ": pattern " + squote(r.rule->source) + " matches no " +
                       what + hint(r.rule->source));
  for (size_t c = 0; c < converters.size(); ++c)
    if (instances[c].empty() && !converters[c].rule->optional) {
      std::string hints;
      for (const auto& s : converters[c].rule->sources) hints += hint(s);
      return not_found(rule_label(converters[c].index, rules[converters[c].index]) + ": source patterns match no " +
                       what + hints);
    }

  // 4. Resolve each converter instance into a group.
  std::map<std::string, std::pair<size_t, std::string>> written;  // param → (group, source key)
  const auto claim = [&](const std::string& param, size_t group, const std::string& from) -> Status {
    auto [it, inserted] = written.emplace(param, std::make_pair(group, from));
    if (inserted) return Status::Ok();
    const ConversionGroup& a = plan.groups_[it->second.first];
    const ConversionGroup& b = plan.groups_[group];
    return invalid_argument("parameter " + squote(param) + " written twice: by " + a.rule_description + " (from " +
                            squote(it->second.second) + ") and by " + b.rule_description + " (from " + squote(from) + ")");
  };
  std::vector<std::string> expected_names;
  for (const auto& [name, _] : expected) expected_names.push_back(name);

  for (size_t c = 0; c < converters.size(); ++c) {
    const CompiledConverter& cc = converters[c];
    const std::string label = rule_label(cc.index, rules[cc.index]);
    for (auto& [_, inst] : instances[c]) {
      ConversionGroup g;
      g.rule = cc.index;
      g.rule_description = label;
      std::string first_source;
      ShapeBundle shapes;
      for (size_t p = 0; p < inst.slots.size(); ++p) {
        auto& items = inst.slots[p];
        const std::string want = join_key(inst.match.prefix, cc.sources[p].substitute(inst.match.captures), inst.match.suffix);
        if (items.empty()) {
          std::string present;
          for (const auto& other : inst.slots)
            if (!other.empty() && present.empty()) present = other[0].renamed;
          return not_found(label + ": missing source " + squote(want) + " (pattern " + squote(cc.sources[p].text()) +
                           ") needed with " + squote(present) + hint(want));
        }
        std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return natural_less(a.list_key, b.list_key); });
        std::vector<PlanTensor> slot;
        ShapeSlot ss{{}, items[0].tensor->dtype};
        for (const Item& it : items) {
          if (it.tensor->dtype != ss.dtype)
            return invalid_argument(label + ": " + squote(it.renamed) + " is " + std::string(dtype_name(it.tensor->dtype)) +
                                    " but " + squote(items[0].renamed) + " is " + std::string(dtype_name(ss.dtype)));
          slot.push_back({it.tensor->name, it.tensor->shape, it.tensor->dtype});
          ss.items.push_back(it.tensor->shape);
        }
        if (first_source.empty()) first_source = items[0].renamed;
        g.sources.push_back(std::move(slot));
        shapes.push_back(std::move(ss));
      }
      // Targets, with their expected shapes.
      ShapeBundle target_shapes;
      for (const WeightPattern& tp : cc.targets) {
        const std::string body = tp.substitute(inst.match.captures);
        std::vector<std::string> names;
        if (!cc.target_lists) {
          names.push_back(join_key(inst.match.prefix, body, inst.match.suffix));
        } else {
          auto full = WeightPattern::parse("^" + join_key(inst.match.prefix, body, inst.match.suffix) + "$");
          if (!full.ok()) return full.status().with_context(label);
          for (const auto& n : expected_names)
            if (full->search(n)) names.push_back(n);
          std::sort(names.begin(), names.end(), natural_less);
          if (names.empty())
            return not_found(label + ": no expected parameter matches target " + squote(full->text()) + " (from " +
                             squote(first_source) + ")");
        }
        std::vector<PlanTensor> slot;
        std::vector<DType> model_dtypes;
        ShapeSlot ts{{}, shapes[0].dtype};
        for (const auto& n : names) {
          auto e = expected.find(n);
          if (e == expected.end())
            return not_found(label + ": produces " + squote(n) + " (from " + squote(first_source) +
                             ") which the model does not expect");
          slot.push_back({n, e->second.shape, shapes[0].dtype});
          ts.items.push_back(e->second.shape);
          model_dtypes.push_back(e->second.dtype.value_or(shapes[0].dtype));
        }
        g.targets.push_back(std::move(slot));
        g.target_model_dtypes.push_back(std::move(model_dtypes));
        target_shapes.push_back(std::move(ts));
      }
      // Resolve the chain, inferring shapes forward.
      const auto& ops = cc.rule->operations;
      std::vector<ConversionOp> resolved = ops;
      for (size_t k = 0; k < resolved.size(); ++k) {
        ConversionOp& op = resolved[k];
        if (op.kind == ConversionOpKind::kChunk && op.sizes.empty()) {
          auto after = shapes_after(resolved, k, target_shapes);
          if (!after.ok())
            return invalid_argument(label + ": Chunk sizes for " + squote(first_source) + ": " + after.status().message() +
                                    "; give Chunk explicit sizes");
          int d = op.dim;
          for (const ShapeSlot& s : after.value()) {
            if (s.items.size() != 1 || shapes.size() != 1 || shapes[0].items.size() != 1)
              return invalid_argument(label + ": Chunk of " + squote(first_source) + " does not yield one tensor per target");
            const int r = static_cast<int>(s.items[0].size());
            const int nd = d < 0 ? d + r : d;
            if (nd < 0 || nd >= r) return invalid_argument(label + ": " + op.describe() + " dim out of range");
            op.sizes.push_back(s.items[0][nd]);
          }
        }
        if (op.kind == ConversionOpKind::kTranspose && op.check_dims) {
          auto after = shapes_after(resolved, k, target_shapes);
          op.check_dims = false;
          if (after.ok() && same_shapes(after.value(), shapes)) {
            resolved.erase(resolved.begin() + static_cast<long>(k));
            --k;
            continue;
          }
        }
        if (op.kind == ConversionOpKind::kConcatenate) {
          op.sizes.clear();
          for (const ShapeSlot& s : shapes) {
            if (s.items.size() != 1) break;
            const int r = static_cast<int>(s.items[0].size());
            const int nd = op.dim < 0 ? op.dim + r : op.dim;
            if (nd >= 0 && nd < r) op.sizes.push_back(s.items[0][nd]);
          }
        }
        auto next = infer_shapes(op, shapes);
        if (!next.ok())
          return invalid_argument(label + ": for " + squote(first_source) + ": " + next.status().message());
        shapes = std::move(next).value();
      }
      // The chain's result must be the targets, shape for shape.
      if (shapes.size() != target_shapes.size())
        return invalid_argument(label + ": for " + squote(first_source) + " the operations yield " +
                                std::to_string(shapes.size()) + " tensors slots but there are " +
                                std::to_string(target_shapes.size()) + " targets");
      for (size_t j = 0; j < shapes.size(); ++j) {
        if (shapes[j].items.size() != target_shapes[j].items.size())
          return invalid_argument(label + ": target " + squote(g.targets[j][0].name) + ": the operations yield " +
                                  std::to_string(shapes[j].items.size()) + " tensors but the model expects " +
                                  std::to_string(target_shapes[j].items.size()));
        for (size_t k = 0; k < shapes[j].items.size(); ++k) {
          if (shapes[j].items[k] != target_shapes[j].items[k])
            return invalid_argument(label + ": shape mismatch for " + squote(g.targets[j][k].name) + ": converted from " +
                                    squote(first_source) + " it is " + shape_to_string(shapes[j].items[k]) +
                                    " but the model expects " + shape_to_string(target_shapes[j].items[k]));
          g.targets[j][k].dtype = shapes[j].dtype;
          // A model that does not pin the dtype stores what the chain makes (MXFP4 from
          // U8 blocks), not the sources' dtype.
          if (auto e = expected.find(g.targets[j][k].name); e != expected.end() && !e->second.dtype)
            g.target_model_dtypes[j][k] = shapes[j].dtype;
        }
      }
      g.ops = std::move(resolved);
      plan.groups_.push_back(std::move(g));
      const size_t gi = plan.groups_.size() - 1;
      for (const auto& slot : plan.groups_[gi].targets)
        for (const auto& t : slot) LOOM_RETURN_IF_ERROR(claim(t.name, gi, first_source));
    }
  }

  // 5. Pass-through: a tensor no converter takes keeps its (renamed) name.
  for (size_t i : pass_through) {
    const SourceTensor& st = source.tensors[i];
    const std::string& key = renamed[i];
    auto e = expected.find(key);
    if (e == expected.end()) {
      plan.unused_.push_back(st.name);
      continue;
    }
    ConversionGroup g;
    g.rule_description = key == st.name ? "pass-through" : "renaming of " + squote(st.name);
    if (e->second.shape != st.shape)
      return invalid_argument(g.rule_description + ": shape mismatch for " + squote(key) + ": " + what + " has " +
                              shape_to_string(st.shape) + " but the model expects " + shape_to_string(e->second.shape));
    g.sources.push_back({{st.name, st.shape, st.dtype}});
    g.targets.push_back({{key, st.shape, st.dtype}});
    g.target_model_dtypes.push_back({e->second.dtype.value_or(st.dtype)});
    plan.groups_.push_back(std::move(g));
    LOOM_RETURN_IF_ERROR(claim(key, plan.groups_.size() - 1, st.name));
  }

  // 6. Every expected parameter written.
  for (const auto& [name, _] : expected)
    if (!written.count(name)) plan.missing_.push_back(name);
  if (!plan.missing_.empty() && !options.allow_missing_params) {
    std::string list;
    for (size_t i = 0; i < plan.missing_.size() && i < 5; ++i) list += (i ? ", " : "") + squote(plan.missing_[i]);
    return not_found(std::to_string(plan.missing_.size()) + " expected parameter(s) not produced by the checkpoint or any rule: " +
                     list + (plan.missing_.size() > 5 ? ", …" : ""));
  }

  // Stream in checkpoint order: the first source of each group decides.
  std::map<std::string, size_t> position;
  for (size_t i = 0; i < source.tensors.size(); ++i) position[source.tensors[i].name] = i;
  std::stable_sort(plan.groups_.begin(), plan.groups_.end(), [&](const ConversionGroup& a, const ConversionGroup& b) {
    return position[a.sources[0][0].name] < position[b.sources[0][0].name];
  });
  return plan;
}

Result<ConversionPlan> ConversionPlan::compose(ConversionPlan first, const WeightRules& rules, const ExpectedParams& expected,
                                               const CompileOptions& options) {
  if (first.second_) return invalid_argument("compose: the first plan already has a second stage");
  // Stage 1's outputs, as stage 2 sees them: names, shapes and the dtypes stage 1 delivers.
  SourceIndex mid;
  std::map<std::string, const ConversionGroup*> producer;
  for (const ConversionGroup& g : first.groups_)
    for (size_t j = 0; j < g.targets.size(); ++j)
      for (size_t k = 0; k < g.targets[j].size(); ++k) {
        const PlanTensor& t = g.targets[j][k];
        mid.tensors.push_back({t.name, g.target_model_dtypes[j][k], t.shape, ""});
        producer[t.name] = &g;
      }
  CompileOptions o = options;
  if (o.sources_name == CompileOptions{}.sources_name) o.sources_name = "parameter";
  // A stage-2 source that is no stage-1 output: say where the pattern does
  // match in the checkpoint, and which stage-1 rule took that tensor.
  const ConversionPlan& one = first;
  o.unmatched_hint = [&one, user = options.unmatched_hint](const std::string& pattern) {
    std::string hint = user ? user(pattern) : std::string();
    auto p = WeightPattern::parse(pattern);
    if (!p.ok()) return hint;
    for (const ConversionGroup& g : one.groups_)
      for (const auto& slot : g.sources)
        for (const PlanTensor& s : slot) {
          if (!p->search(s.name)) continue;
          std::string outs;
          size_t n = 0;
          for (const auto& ts : g.targets)
            for (const PlanTensor& t : ts)
              if (n++ < 3) outs += (outs.empty() ? "" : ", ") + squote(t.name);
          if (n > 3) outs += ", …";
          return hint + "; it matches checkpoint tensor " + squote(s.name) + ", which the first stage's " +
                 g.rule_description + " turns into " + outs +
                 " (second-stage rules are written against the first stage's parameter names)";
        }
    for (const std::string& u : one.unused_)
      if (p->search(u))
        return hint + "; it matches checkpoint tensor " + squote(u) + ", which the first stage leaves unused";
    return hint + "; neither a checkpoint tensor nor a first-stage parameter matches it";
  };
  auto second = compile(rules, mid, expected, o);
  if (!second.ok()) return second.status();
  // What stage 2 drops could not be saved back: a rule list that replaced a
  // parameter without reading it.
  for (const std::string& u : second->unused_) {
    const ConversionGroup* g = producer.at(u);
    return invalid_argument("parameter " + squote(u) + " (from " + g->rule_description + ") is read by no " +
                            o.rules_name + " and is no longer an expected parameter, so it could not be saved back");
  }
  first.second_ = std::make_shared<const ConversionPlan>(std::move(second).value());
  return first;
}


}  // namespace loom
