#include "meshtrain/plan/machine_bench.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <vector>

#include <unistd.h>

#include "meshtrain/comm/bench/comm_bench.h"
#include "meshtrain/core/threading.h"
#include "meshtrain/kernels/cpu/gemm_peak.h"

namespace meshtrain::plan {

namespace {

std::string fixed(double v, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

std::string bench_machine(const MachineBenchOptions& o) {
  const int cores = hardware_cores();
  // One core is one device: GEMM and copy run on one thread (a shared,
  // busy machine also stalls multi-threaded kernels at their barriers).
  set_compute_threads(1);
  std::ostringstream os;
  os << "# This machine, measured by `meshtrain bench machine` (" << cores << " cores).\n"
     << "# A CPU \"device\" is one core; the ranks of a run share the node's cores (node.shared).\n"
     << "name = \"this machine (" << cores << " cores, measured)\"\n"
     << "source = \"meshtrain bench machine: GEMM of the kernel table and a STREAM-like copy on one core, alpha-beta "
        "fits of the threads backend's collectives\"\n\n";

  // GEMM classes: the smallest dimension (the reduction k here) sets the
  // class; m = 1024 tokens, n at least 256 like the layers' projections.
  const int64_t dims[] = {16, 32, 64, 128, 256, 512, 1024};
  std::vector<std::pair<int64_t, double>> f32, bf16;
  for (int64_t d : dims) {
    const int64_t n = std::max<int64_t>(d, 256);
    f32.push_back({d, kernels::measure_gemm_core_flops(DType::F32, 1024, n, d, o.seconds_per_gemm)});
    bf16.push_back({d, kernels::measure_gemm_core_flops(DType::BF16, 1024, n, d, o.seconds_per_gemm)});
  }
  auto best = [](const auto& v) {
    double b = 0;
    for (const auto& [d, r] : v) b = std::max(b, r);
    return b;
  };
  const size_t copy_bytes = size_t(256) << 20;
  const double copy = comm::bench::copy_bandwidth(copy_bytes, 1);  // read + written bytes per second, one core
  const double memory = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  os << "[device]\n"
     << "memory = \"" << fixed(memory / cores / (1 << 20), 0) << "MiB\"   # physical memory / cores\n"
     << "memory_bandwidth_gbps = " << fixed(copy / 1e9, 2) << "   # STREAM-like copy on one core\n"
     << "peak_tflops = { fp32 = " << fixed(best(f32) / 1e12, 5) << ", bf16 = " << fixed(best(bf16) / 1e12, 5)
     << " }   # best GEMM rate measured on one core\n\n";
  auto classes = [&](const char* name, const auto& v) {
    os << name << " = [";
    for (size_t i = 0; i < v.size(); ++i)
      os << (i ? ", " : "") << "{ min_dim = " << v[i].first << ", tflops = " << fixed(v[i].second / 1e12, 5) << " }";
    os << "]\n";
  };
  os << "[gemm]   # one core, by the smallest of m, n, k (m = 1024, n = max(256, k))\n";
  classes("fp32", f32);
  classes("bf16", bf16);
  os << "\n[node]\ndevices = " << cores << "\nshared = true\n\n";

  set_compute_threads(cores);
  // Collectives on the threads backend: alpha-beta per op (docs/math.md (M.20), (M.23)).
  comm::bench::BenchOptions bo;
  bo.ranks = o.ranks > 0 ? o.ranks : std::max(2, cores);
  bo.max_bytes = o.max_bytes;
  bo.iters = o.iters;
  bo.ops = {comm::OpKind::AllReduce, comm::OpKind::ReduceScatter, comm::OpKind::AllGather};
  int R = 0;
  const auto ms = comm::bench::measure(bo, &R);
  std::vector<std::pair<const char*, comm::bench::AlphaBeta>> fits;
  for (comm::OpKind op : bo.ops) {
    comm::bench::AlphaBeta ab = comm::bench::fit_alpha_beta(op, R, ms);
    ab.alpha_s = std::max(ab.alpha_s, 1e-7);  // a fit can land at or below zero latency
    fits.push_back({op == comm::OpKind::AllReduce ? "all_reduce" : op == comm::OpKind::ReduceScatter ? "reduce_scatter"
                                                                                                       : "all_gather",
                    ab});
  }
  auto line = [&](const comm::bench::AlphaBeta& ab) {
    const double gbps = ab.beta_s_per_byte > 0 ? 1e-9 / ab.beta_s_per_byte : copy / 1e9;
    return "alpha_us = " + fixed(ab.alpha_s * 1e6, 3) + ", bandwidth_gbps = " + fixed(gbps, 3);
  };
  for (const char* link : {"intra", "inter"}) {
    os << "[link." << link << "]   # threads backend, " << R << " ranks, alpha-beta fit of docs/math.md (M.20), (M.23)"
       << (std::string(link) == "inter" ? "; no second node here: the same figures" : "") << "\n";
    const comm::bench::AlphaBeta& base = fits.back().second;  // all_gather: one exchange per round
    os << "alpha_us = " << fixed(base.alpha_s * 1e6, 3) << "\nbandwidth_gbps = "
       << fixed(base.beta_s_per_byte > 0 ? 1e-9 / base.beta_s_per_byte : copy / 1e9, 3) << "\n";
    for (const auto& [name, ab] : fits) os << name << " = { " << line(ab) << " }\n";
    os << "\n";
  }
  return os.str();
}

}  // namespace meshtrain::plan
