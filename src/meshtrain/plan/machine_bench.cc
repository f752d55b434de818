#include "meshtrain/plan/machine_bench.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "meshtrain/comm/bench/comm_bench.h"
#include "meshtrain/comm/launch.h"
#include "meshtrain/comm/mpi_world.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/median.h"
#include "meshtrain/core/threading.h"
#include "meshtrain/kernels/cpu/gemm_peak.h"
#include "meshtrain/plan/link_bench.h"

namespace meshtrain::plan {

namespace {

std::string fixed(double v, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// Every rank's `mine` (the same length everywhere), rank by rank.
std::vector<std::vector<double>> gather(comm::ProcessGroup& world, const std::vector<double>& mine) {
  const size_t k = mine.size(), R = size_t(world.size());
  std::vector<double> all(k * R, 0.0);
  std::copy(mine.begin(), mine.end(), all.begin() + long(k * size_t(world.rank())));
  world.all_gather(all.data() + k * size_t(world.rank()), all.data(), all.size(), DType::F64);
  std::vector<std::vector<double>> out(R);
  for (size_t r = 0; r < R; ++r) out[r].assign(all.begin() + long(k * r), all.begin() + long(k * (r + 1)));
  return out;
}

// The running kernel's boot id as a number: nodes that share it share one
// machine's cores (an emulated cluster's namespaces).
double machine_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return double(std::hash<std::string>{}(id) & ((uint64_t(1) << 52) - 1));
}

// Where the job's ranks are: nodes in node-major order, each with the same
// number of ranks (a node's ranks are mesh ranks node * per_node ...).
struct Placement {
  std::vector<std::string> nodes;
  int per_node = 1, node = 0, local = 0;
};

Placement placement(const std::vector<std::string>& host_of_rank, int rank) {
  Placement p;
  std::map<std::string, int> count;
  for (const std::string& h : host_of_rank)
    if (count[h]++ == 0) p.nodes.push_back(h);
  p.per_node = count[p.nodes.front()];
  for (const auto& [host, n] : count)
    MT_REQUIRE(ConfigError, n == p.per_node, "bench machine: host ", host, " runs ", n, " ranks and ",
               p.nodes.front(), " ", p.per_node, ": give every host of the hostfile the same slots");
  p.node = rank / p.per_node;
  p.local = rank % p.per_node;
  return p;
}

// Cores of one node: the cores this process may use, split between the
// nodes that run on the same machine (their ranks report one boot id).
int cores_per_node(comm::ProcessGroup& world, const Placement& p, std::string& note) {
  const double cpus = double(sysconf(_SC_NPROCESSORS_ONLN));
  const auto facts = gather(world, {double(hardware_cores()), machine_id(), cpus});
  int cores = 1 << 30;
  for (int node = 0; node < int(p.nodes.size()); ++node) {
    const std::vector<double>& f = facts[size_t(node * p.per_node)];
    std::set<int> sharing;
    for (int other = 0; other < int(p.nodes.size()); ++other)
      if (facts[size_t(other * p.per_node)][1] == f[1]) sharing.insert(other);
    const int share = std::max(1, std::min(int(f[0]), int(f[2]) / int(sharing.size())));
    cores = std::min(cores, share);
    if (sharing.size() > 1 && node == 0)
      note = std::to_string(sharing.size()) + " nodes share one machine of " + std::to_string(int(f[2])) +
             " cores (one kernel boot id): " + std::to_string(share) + " per node";
  }
  return cores;
}

// GEMM classes and the copy bandwidth on one core, every rank at once.
// A class is a linear layer of `in` = d inputs and out = max(256, d)
// outputs over 1024 tokens (the smallest dimension, d, sets the class), at
// the rate of its three products with operands from beyond the caches, as a
// step runs them (kernels/cpu/gemm_peak.h); the peak is the best single
// product of the classes, cache-hot. The median over ranks of each figure.
struct Compute {
  std::vector<std::pair<int64_t, double>> f32, bf16;
  double peak_f32 = 0, peak_bf16 = 0, copy = 0;
};

Compute measure_compute(comm::ProcessGroup& world, const MachineBenchOptions& o) {
  set_compute_threads(1);
  const int64_t dims[] = {16, 32, 64, 128, 256, 512, 1024};
  std::vector<double> mine;
  world.barrier();
  double peak_f32 = 0, peak_bf16 = 0;
  // Every rank measures the same class at once, three times: a core's
  // rate depends on what its neighbours run (a sibling hyperthread, the
  // shared caches), and one disturbed try must not set a class. The median
  // of the three.
  const auto class_rate = [&](DType t, int64_t out, int64_t d) {
    std::vector<double> tries;
    for (int i = 0; i < 3; ++i) {
      world.barrier();
      tries.push_back(kernels::measure_linear_core_flops(t, 1024, out, d, o.seconds_per_gemm / 3));
    }
    return median(tries);
  };
  for (int64_t d : dims) {
    const int64_t out = std::max<int64_t>(d, 256);
    mine.push_back(class_rate(DType::F32, out, d));
    mine.push_back(class_rate(DType::BF16, out, d));
    peak_f32 = std::max(peak_f32, kernels::measure_gemm_core_flops(DType::F32, 1024, out, d, o.seconds_per_gemm / 4));
    peak_bf16 = std::max(peak_bf16, kernels::measure_gemm_core_flops(DType::BF16, 1024, out, d, o.seconds_per_gemm / 4));
  }
  mine.insert(mine.end(), {peak_f32, peak_bf16});
  world.barrier();
  mine.push_back(comm::bench::copy_bandwidth(size_t(64) << 20, 1));  // read + written bytes per second
  const auto all = gather(world, mine);
  auto med = [&](size_t i) {
    std::vector<double> v;
    for (const auto& r : all) v.push_back(r[i]);
    return median(v);
  };
  Compute c;
  for (size_t i = 0; i < std::size(dims); ++i) {
    c.f32.push_back({dims[i], med(2 * i)});
    c.bf16.push_back({dims[i], med(2 * i + 1)});
  }
  c.peak_f32 = med(mine.size() - 3);
  c.peak_bf16 = med(mine.size() - 2);
  c.copy = med(mine.size() - 1);
  return c;
}

// shared_by > 0: the figures are what each of that many streams crossing a
// node's link at once gets (hardware.h).
std::string link_section(const std::string& name, const std::vector<LinkSample>& samples, int R,
                         const std::string& how, int shared_by = 0) {
  std::ostringstream os;
  os << "[link." << name << "]   # " << how << "\n";
  if (shared_by > 0) os << "shared_by = " << shared_by << "   # the node's ranks crossed its link at once\n";
  const std::map<comm::OpKind, const char*> keys = {{comm::OpKind::AllReduce, "all_reduce"},
                                                    {comm::OpKind::ReduceScatter, "reduce_scatter"},
                                                    {comm::OpKind::AllGather, "all_gather"},
                                                    {comm::OpKind::Send, "send"}};
  auto figures = [](const AlphaBeta& ab) {
    return "alpha_us = " + fixed(ab.alpha_s * 1e6, 3) + ", bandwidth_gbps = " + fixed(ab.bytes_per_s / 1e9, 4);
  };
  const AlphaBeta base = fit_link(comm::OpKind::AllGather, R, samples);  // one exchange per round
  os << "alpha_us = " << fixed(base.alpha_s * 1e6, 3) << "\nbandwidth_gbps = " << fixed(base.bytes_per_s / 1e9, 4)
     << "\n";
  for (comm::OpKind op : priced_ops()) {
    os << keys.at(op) << " = { " << figures(fit_link(op, R, samples)) << " }\n#   measured:";
    for (const LinkSample& s : samples)
      if (s.op == op) os << " " << s.bytes << "B " << fixed(s.seconds * 1e6, 0) << "us";
    os << "\n";
  }
  return os.str() + "\n";
}

// The collectives' samples: each node's ranks, one node after another
// (nodes of one machine, as an emulated cluster's, would otherwise take
// each other's cores), then every place's ranks across the nodes at once (a
// step's groups cross side by side and share the nodes' links: shared_by),
// then the whole job as one group.
struct LinkSamples {
  std::vector<LinkSample> in_node, across, whole;
};

LinkSamples measure_links(comm::ProcessGroup& world, const Placement& p, const LinkBenchOptions& lo) {
  const auto intra = world.split(p.node, p.local, comm::SplitPlace{p.per_node, p.local}, "node");
  const auto inter = world.split(p.local, p.node, comm::SplitPlace{int(p.nodes.size()), p.node}, "across");
  LinkSamples l;
  for (int node = 0; node < int(p.nodes.size()); ++node) {
    if (node == p.node && p.per_node > 1) l.in_node = time_link(*intra, *intra, lo);
    world.barrier();
  }
  if (p.nodes.size() > 1) l.across = time_link(*inter, world, lo);
  if (p.nodes.size() > 1 && p.per_node > 1) l.whole = time_link(world, world, lo);
  return l;
}

// The profile's opening comment, name and source.
void write_header(std::ostringstream& os, const Placement& p, const LinkBenchOptions& lo, int cores) {
  const int N = int(p.nodes.size());
  std::string hosts;
  for (const std::string& h : p.nodes) hosts += (hosts.empty() ? "" : ", ") + h;
  os << "# Measured by `meshtrain bench machine`: " << N << " node(s) (" << hosts << ") x " << p.per_node
     << " rank(s), " << hardware_cores() << " cores visible to each rank.\n"
     << "# A CPU \"device\" is one core; the ranks of a run share their node's cores (node.shared).\n"
     << "# Collectives: f32 messages of " << lo.min_bytes << " bytes to " << (lo.max_bytes >> 10)
     << " KiB, x4 apart; per size the median of at least " << lo.iters
     << " repetitions (after a warm-up) of the slowest member's time;\n"
     << "# fitted to docs/math.md (M.20): the line through the fastest of the three smallest messages, its slope the\n"
     << "# least squares fit of the others against the bytes each rank sends (plan/link_bench.h).\n"
     << "name = \"" << (N > 1 ? std::to_string(N) + " nodes (" + hosts + ")" : "this machine") << ", "
     << cores << " core(s) per node, measured\"\n"
     << "source = \"meshtrain bench machine: GEMM of the kernel table and a STREAM-like copy on one core with every "
        "rank measuring at once, alpha-beta fits of the collectives inside and across nodes\"\n\n";
}

// [device], [gemm] and [node].
void write_compute(std::ostringstream& os, const Compute& c, int ranks, int cores, const std::string& sharing) {
  const double memory = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  os << "[device]\n"
     << "memory = \"" << fixed(memory / double(hardware_cores()) / (1 << 20), 0) << "MiB\"   # physical memory / cores\n"
     << "memory_bandwidth_gbps = " << fixed(c.copy / 1e9, 2) << "   # STREAM-like copy on one core, median of "
     << ranks << " ranks\n"
     << "peak_tflops = { fp32 = " << fixed(c.peak_f32 / 1e12, 5) << ", bf16 = " << fixed(c.peak_bf16 / 1e12, 5)
     << " }   # best GEMM rate measured on one core (a product repeated, cache-hot)\n\n";
  auto classes = [&](const char* name, const auto& v) {
    os << name << " = [";
    for (size_t i = 0; i < v.size(); ++i)
      os << (i ? ", " : "") << "{ min_dim = " << v[i].first << ", tflops = " << fixed(v[i].second / 1e12, 5) << " }";
    os << "]\n";
  };
  os << "[gemm]   # one core (its thread's CPU time), by the smallest of m, n, k: a linear layer of d inputs and\n"
     << "# max(256, d) outputs over 1024 tokens, its forward, input-gradient and weight-gradient products over\n"
     << "# operands from beyond the caches (kernels/cpu/gemm_peak.h); median of three tries of " << ranks
     << " ranks\n";
  classes("fp32", c.f32);
  classes("bf16", c.bf16);
  os << "\n[node]   # cores per node" << (sharing.empty() ? "" : ": " + sharing) << "\ndevices = " << cores
     << "\nshared = true\n\n";
}

// [link.intra], [link.inter] and [link.inter.whole_nodes]; with one node or
// one rank a node, the missing side repeats the other and says so.
void write_links(std::ostringstream& os, const LinkSamples& l, const Placement& p, int ranks) {
  const int N = int(p.nodes.size());
  const std::string within = std::to_string(p.per_node) + " ranks of a node, one node after another";
  const std::string between = std::to_string(N) + " nodes, one rank of each, every rank of a node at once";
  if (!l.in_node.empty() && !l.across.empty()) {
    os << link_section("intra", l.in_node, p.per_node, within);
    os << link_section("inter", l.across, N, between, p.per_node);
    os << link_section("inter.whole_nodes", l.whole, ranks,
                       "the " + std::to_string(ranks) + " ranks as one group: every rank of each node");
  } else if (!l.in_node.empty()) {
    os << link_section("intra", l.in_node, p.per_node, within);
    os << link_section("inter", l.in_node, p.per_node, within + "; no second node here: the same figures");
  } else if (!l.across.empty()) {
    os << link_section("intra", l.across, N, between + "; one rank per node, nothing inside a node: the same figures");
    os << link_section("inter", l.across, N, between);
  } else {
    MT_THROW(ConfigError, "bench machine: one rank measures no collective: give --ranks 2 or more, or a hostfile "
                          "with two slots or two hosts");
  }
}

std::string measure(comm::ParallelContext& ctx, const MachineBenchOptions& o) {
  comm::ProcessGroup& world = *ctx.world;
  const Placement p = placement(ctx.host_of_rank, ctx.rank);
  std::string sharing;
  const int cores = cores_per_node(world, p, sharing);
  const Compute c = measure_compute(world, o);
  LinkBenchOptions lo;
  lo.max_bytes = o.max_bytes;
  lo.iters = o.iters;
  const LinkSamples links = measure_links(world, p, lo);
  if (ctx.rank != 0) return "";
  std::ostringstream os;
  write_header(os, p, lo, cores);
  write_compute(os, c, ctx.world_size, cores, sharing);
  write_links(os, links, p, ctx.world_size);
  return os.str();
}

}  // namespace

std::string bench_machine(const MachineBenchOptions& o) {
  comm::LaunchOptions lo;
  lo.backend = comm::launched_by_mpirun() ? comm::Backend::Mpi : comm::Backend::Threads;
  lo.world_size = o.ranks > 0 ? o.ranks : std::max(2, hardware_cores());
  std::string toml;
  comm::launch(lo, [&](comm::ParallelContext& ctx) {
    std::string mine = measure(ctx, o);
    if (ctx.rank == 0) toml = std::move(mine);
  });
  return toml;
}

}  // namespace meshtrain::plan
