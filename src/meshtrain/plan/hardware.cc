#include "meshtrain/plan/hardware.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "meshtrain/core/error.h"
#include "meshtrain/plan/byte_size.h"

namespace meshtrain::plan {

namespace {

// Strict access to one table of the file: missing keys, wrong types and
// unknown keys are errors naming the file and the key path.
class Section {
 public:
  Section(const std::string& file, const toml::table* t, std::string path) : file_(file), t_(t), path_(std::move(path)) {}

  const toml::node* find(const std::string& key) {
    known_.insert(key);
    return t_ ? t_->get(key) : nullptr;
  }
  const toml::node& need(const std::string& key) {
    const toml::node* n = find(key);
    MT_REQUIRE(ConfigError, n != nullptr, file_, ": missing ", where(key));
    return *n;
  }
  double number(const std::string& key) {
    const toml::node& n = need(key);
    auto v = n.value<double>();
    MT_REQUIRE(ConfigError, v.has_value(), file_, ": ", where(key), " must be a number");
    MT_REQUIRE(ConfigError, *v >= 0, file_, ": ", where(key), " = ", *v, " cannot be negative");
    return *v;
  }
  std::string text(const std::string& key) {
    auto v = need(key).value<std::string>();
    MT_REQUIRE(ConfigError, v.has_value(), file_, ": ", where(key), " must be a string");
    return *v;
  }
  Section table(const std::string& key, bool required = true) {
    const toml::node* n = required ? &need(key) : find(key);
    if (!n) return Section(file_, nullptr, where(key));
    MT_REQUIRE(ConfigError, n->is_table(), file_, ": ", where(key), " must be a table");
    return Section(file_, n->as_table(), where(key));
  }
  bool present() const { return t_ != nullptr; }
  const std::string& file() const { return file_; }
  const toml::table* raw() const { return t_; }
  std::string where(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  void finish() const {
    if (!t_) return;
    for (const auto& [k, v] : *t_)
      MT_REQUIRE(ConfigError, known_.count(std::string(k.str())), file_, ": unknown key ",
                 where(std::string(k.str())));
  }

 private:
  std::string file_;
  const toml::table* t_;
  std::string path_;
  std::set<std::string> known_;
};

DType dtype_key(const std::string& file, const std::string& where, const std::string& k) {
  if (k == "fp32" || k == "f32") return DType::F32;
  if (k == "bf16") return DType::BF16;
  if (k == "fp16" || k == "f16") return DType::F16;
  if (k == "fp64" || k == "f64") return DType::F64;
  MT_THROW(ConfigError, file, ": ", where, ".", k, ": unknown dtype (fp32, bf16, fp16, fp64)");
}

// alpha_us and bandwidth_gbps of a link or of one collective on it.
AlphaBeta read_alpha_beta(Section& s) {
  AlphaBeta ab;
  ab.alpha_s = s.number("alpha_us") * 1e-6;
  const double gbps = s.number("bandwidth_gbps");
  MT_REQUIRE(ConfigError, gbps > 0, s.file(), ": ", s.where("bandwidth_gbps"), " must be positive");
  ab.bytes_per_s = gbps * 1e9;
  return ab;
}

LinkProfile link(Section s) {
  LinkProfile l;
  l.base = read_alpha_beta(s);
  if (s.find("shared_by")) {
    const double n = s.number("shared_by");
    MT_REQUIRE(ConfigError, n >= 1 && n == double(int(n)), s.file(), ": ", s.where("shared_by"),
               " must be a whole number of streams, at least 1");
    l.shared_by = int(n);
  }
  const std::pair<const char*, comm::OpKind> ops[] = {{"all_reduce", comm::OpKind::AllReduce},
                                                      {"reduce_scatter", comm::OpKind::ReduceScatter},
                                                      {"all_gather", comm::OpKind::AllGather},
                                                      {"all_to_all", comm::OpKind::AllToAll},
                                                      {"send", comm::OpKind::Send}};
  for (const auto& [key, kind] : ops) {
    Section op = s.table(key, /*required=*/false);
    if (!op.present()) continue;
    l.per_op[kind] = read_alpha_beta(op);
    op.finish();
  }
  if (Section whole = s.table("whole_nodes", /*required=*/false); whole.present())
    l.whole_nodes = std::make_shared<const LinkProfile>(link(whole));
  s.finish();
  return l;
}

}  // namespace

const AlphaBeta& LinkProfile::for_op(comm::OpKind k) const {
  if (k == comm::OpKind::Recv) k = comm::OpKind::Send;
  auto it = per_op.find(k);
  return it == per_op.end() ? base : it->second;
}

CrossingLink crossing_link(const HardwareProfile& hw, int here, int per_node) {
  if (here == per_node && hw.inter.whole_nodes) return {hw.inter.whole_nodes.get(), 1.0};
  if (!hw.shared_node) return {&hw.inter, 1.0};
  const double streams = double(per_node) / double(here);
  return {&hw.inter, double(std::max(1, hw.inter.shared_by)) / streams};
}

double HardwareProfile::peak(DType t) const {
  auto it = peak_flops.find(t);
  MT_REQUIRE(ConfigError, it != peak_flops.end(), path, ": device.peak_tflops has no ", dtype_name(t),
             " entry (the precision policy computes in it)");
  return it->second;
}

double HardwareProfile::gemm_rate(DType t, int64_t m, int64_t n, int64_t k) const {
  auto it = gemm.find(t);
  MT_REQUIRE(ConfigError, it != gemm.end() && !it->second.empty(), path, ": gemm has no ", dtype_name(t),
             " classes (the precision policy multiplies in it)");
  // The classes sample one smooth curve of the smallest dimension: between
  // two of them the rate is interpolated in log2 of the dimension (a 192
  // wide projection runs between the 128 and 256 classes, not at 128's).
  const std::vector<GemmClass>& classes = it->second;  // sorted by min_dim
  const int64_t smallest = std::max<int64_t>(1, std::min({m, n, k}));
  const auto above = std::upper_bound(classes.begin(), classes.end(), smallest,
                                      [](int64_t d, const GemmClass& c) { return d < c.min_dim; });
  double rate = above == classes.begin() ? above->flops_per_s : std::prev(above)->flops_per_s;
  if (above != classes.begin() && above != classes.end()) {
    const GemmClass& below = *std::prev(above);
    const double lo = std::log2(double(std::max<int64_t>(1, below.min_dim)));
    const double x = (std::log2(double(smallest)) - lo) / (std::log2(double(above->min_dim)) - lo);
    rate += x * (above->flops_per_s - rate);
  }
  return std::min(rate, peak(t));
}

namespace {

// [device]: memory, its bandwidth and the peak rate per dtype.
void parse_device(Section device, const std::string& file, HardwareProfile& h) {
  h.memory_bytes = parse_bytes(device.text("memory"), file + ": device.memory");
  h.memory_bytes_per_s = device.number("memory_bandwidth_gbps") * 1e9;
  Section peaks = device.table("peak_tflops");
  for (const auto& [k, v] : *peaks.raw()) {
    const std::string key(k.str());
    h.peak_flops[dtype_key(file, "device.peak_tflops", key)] = peaks.number(key) * 1e12;
  }
  MT_REQUIRE(ConfigError, !h.peak_flops.empty(), file, ": device.peak_tflops lists no dtype");
  device.finish();
}

// [gemm]: per dtype, the classes { min_dim, tflops } sorted by min_dim.
void parse_gemm(Section gemm, const std::string& file, HardwareProfile& h) {
  for (const auto& [k, v] : *gemm.raw()) {
    const std::string key(k.str());
    const DType t = dtype_key(file, "gemm", key);
    gemm.find(key);
    const toml::array* classes = v.as_array();
    MT_REQUIRE(ConfigError, classes && !classes->empty(), file, ": gemm.", key,
               " must be a list of { min_dim = .., tflops = .. }");
    for (const toml::node& c : *classes) {
      MT_REQUIRE(ConfigError, c.is_table(), file, ": gemm.", key, " entries must be tables");
      Section cls(file, c.as_table(), "gemm." + key + "[]");
      h.gemm[t].push_back({int64_t(cls.number("min_dim")), cls.number("tflops") * 1e12});
      cls.finish();
    }
    std::sort(h.gemm[t].begin(), h.gemm[t].end(), [](auto& a, auto& b) { return a.min_dim < b.min_dim; });
  }
  MT_REQUIRE(ConfigError, !h.gemm.empty(), file, ": gemm lists no dtype");
}

// [node]: devices a node and whether CPU ranks share them.
void parse_node(Section node, const std::string& file, HardwareProfile& h) {
  h.devices_per_node = int(node.number("devices"));
  MT_REQUIRE(ConfigError, h.devices_per_node >= 1, file, ": node.devices must be at least 1");
  if (const toml::node* shared = node.find("shared")) {
    MT_REQUIRE(ConfigError, shared->is_boolean(), file, ": node.shared must be true or false");
    h.shared_node = shared->value<bool>().value_or(false);
  }
  node.finish();
}

}  // namespace

HardwareProfile parse_hardware(const std::string& text, const std::string& file) {
  toml::table root;
  try {
    root = toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << e.description() << " (line " << e.source().begin.line << ")";
    MT_THROW(ConfigError, file, ": ", os.str());
  }
  Section top(file, &root, "");
  HardwareProfile h;
  h.path = file;
  h.name = top.text("name");
  h.source = top.text("source");
  parse_device(top.table("device"), file, h);
  parse_gemm(top.table("gemm"), file, h);
  parse_node(top.table("node"), file, h);
  Section links = top.table("link");
  h.intra = link(links.table("intra"));
  h.inter = link(links.table("inter"));
  links.finish();
  Section over = top.table("overheads", /*required=*/false);
  if (over.present()) {
    if (over.find("layer_us")) h.per_layer_overhead_s = over.number("layer_us") * 1e-6;
    over.finish();
  }
  top.finish();
  return h;
}

HardwareProfile load_hardware(const std::string& path) {
  std::ifstream in(path);
  MT_REQUIRE(ConfigError, in.good(), "--hardware ", path, ": cannot open the file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_hardware(ss.str(), path);
}

}  // namespace meshtrain::plan
