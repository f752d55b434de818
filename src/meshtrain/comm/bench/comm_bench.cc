#include "meshtrain/comm/bench/comm_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "meshtrain/comm/hierarchical_group.h"
#include "meshtrain/comm/mpi_world.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/threading.h"

namespace meshtrain::comm::bench {
namespace {

using Clock = std::chrono::steady_clock;

std::string human(size_t b) {
  char buf[32];
  if (b >= (size_t(1) << 20)) std::snprintf(buf, sizeof buf, "%zuM", b >> 20);
  else std::snprintf(buf, sizeof buf, "%zuK", b >> 10);
  return buf;
}

// One timed call of `op` with M = bytes (f32).
void call_op(ProcessGroup& g, OpKind op, size_t bytes, char* a, char* b) {
  const int R = g.size(), me = g.rank();
  const size_t n = bytes / 4;
  switch (op) {
    case OpKind::AllReduce: g.all_reduce(a, b, n, DType::F32); break;
    case OpKind::ReduceScatter: g.reduce_scatter(a, b, n, DType::F32); break;
    case OpKind::AllGather: g.all_gather(a + chunk_offset(n, R, me) * 4 * 0, b, n, DType::F32); break;
    case OpKind::AllToAll: g.all_to_all(a, b, n / size_t(R), DType::F32); break;
    case OpKind::Broadcast: g.broadcast(a, n, DType::F32, 0); break;
    default: g.barrier(); break;
  }
}

int iterations(const BenchOptions& o, size_t bytes) {
  // Small messages are cheap and noisy: take more samples.
  return std::clamp(int((size_t(64) << 20) / std::max<size_t>(bytes, 1)), o.iters, 200);
}

}  // namespace

size_t parse_size(const std::string& s) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (const std::exception&) {
    MT_THROW(ConfigError, "bad size '", s, "' (e.g. 4K, 16M)");
  }
  MT_REQUIRE(ConfigError, v >= 0, "bad size '", s, "' (e.g. 4K, 16M)");
  std::string unit = s.substr(pos);
  if (unit == "K" || unit == "KiB") v *= 1024;
  else if (unit == "M" || unit == "MiB") v *= 1024 * 1024;
  else if (unit == "G" || unit == "GiB") v *= 1024.0 * 1024 * 1024;
  else MT_REQUIRE(ConfigError, unit.empty(), "bad size '", s, "' (e.g. 4K, 16M)");
  MT_REQUIRE(ConfigError, v <= 0x1p50, "size '", s, "': at most 1048576G (2^50 bytes)");  // size_t(v) stays defined
  return size_t(v);
}

OpKind parse_op(const std::string& s) {
  for (OpKind k : {OpKind::AllReduce, OpKind::ReduceScatter, OpKind::AllGather, OpKind::AllToAll,
                   OpKind::Broadcast, OpKind::Barrier})
    if (op_kind_name(k) == s) return k;
  MT_THROW(ConfigError, "unknown op '", s, "'");
}

BenchOptions parse_args(const std::vector<std::string>& args) {
  BenchOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&]() -> const std::string& {
      MT_REQUIRE(ConfigError, i + 1 < args.size(), "missing value after ", args[i]);
      return args[++i];
    };
    const std::string& a = args[i];
    if (a == "--backend") o.backend = parse_backend(value());
    else if (a == "--ranks") o.ranks = std::stoi(value());
    else if (a == "--min-bytes") o.min_bytes = parse_size(value());
    else if (a == "--max-bytes") o.max_bytes = parse_size(value());
    else if (a == "--iters") o.iters = std::stoi(value());
    else if (a == "--hierarchical") o.hierarchical = true;
    else if (a == "--ops") {
      o.ops.clear();
      std::string list = value();
      size_t start = 0;
      while (start <= list.size()) {
        size_t comma = list.find(',', start);
        if (comma == std::string::npos) comma = list.size();
        o.ops.push_back(parse_op(list.substr(start, comma - start)));
        start = comma + 1;
      }
    } else {
      MT_THROW(ConfigError, "unknown flag '", a,
               "' (bench comm [--backend threads|mpi] [--ranks N] [--min-bytes 4K] [--max-bytes 256M] [--iters N] "
               "[--ops all_reduce,reduce_scatter,all_gather,all_to_all,broadcast] [--hierarchical])");
    }
  }
  MT_REQUIRE(ConfigError, o.ranks >= 1 && o.min_bytes >= 4 && o.min_bytes <= o.max_bytes, "bad bench options");
  return o;
}

double copy_bandwidth(size_t bytes, int threads) {
  const size_t n = bytes / 8;
  std::vector<double> a(n, 1.0), b(n, 0.0);
  double best = 1e30;
  for (int it = 0; it < 5; ++it) {
    const auto t0 = Clock::now();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; ++i) b[i] = a[i];
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return 2.0 * double(n * 8) / best;
}

double bound_bytes(OpKind op, size_t M, int R) {
  const double m = double(M), r = double(R);
  switch (op) {
    case OpKind::AllReduce: return 2 * r * m;       // read every input, write every output
    case OpKind::ReduceScatter: return (r + 1) * m; // read R inputs, write M in total
    case OpKind::AllGather: return (r + 1) * m;     // read M in total, write R outputs
    case OpKind::AllToAll: return 2 * r * m;
    case OpKind::Broadcast: return r * m;           // read once, write R-1 copies
    default: return 0;
  }
}

double busbw_factor(OpKind op, int R) {
  if (R <= 1) return 1;
  switch (op) {
    case OpKind::AllReduce: return 2.0 * (R - 1) / R;
    case OpKind::Broadcast: return 1;
    default: return double(R - 1) / R;
  }
}

AlphaBeta fit_alpha_beta(OpKind op, int R, const std::vector<Measurement>& ms) {
  // docs/math.md (M.20), (M.23): all-reduce 2(R-1) rounds and 2(R-1)/R * M; the
  // others R-1 rounds and (R-1)/R * M. Weighted by 1/t^2 so small sizes set alpha.
  const double ka = op == OpKind::AllReduce ? 2.0 * (R - 1) : double(std::max(R - 1, 1));
  const double kb = op == OpKind::AllReduce ? 2.0 * (R - 1) / R : (R > 1 ? double(R - 1) / R : 1.0);
  double sw = 0, sx = 0, sxx = 0, sy = 0, sxy = 0;
  for (const auto& m : ms) {
    if (m.op != op || m.seconds <= 0) continue;
    const double w = 1.0 / (m.seconds * m.seconds), x = double(m.bytes), y = m.seconds;
    sw += w, sx += w * x, sxx += w * x * x, sy += w * y, sxy += w * x * y;
  }
  const double det = sw * sxx - sx * sx;
  if (det <= 0) return {};
  const double a = (sxx * sy - sx * sxy) / det, b = (sw * sxy - sx * sy) / det;
  return {a / ka, b / kb};
}

std::vector<Measurement> measure(const BenchOptions& o, int* ranks, std::string* layout) {
  LaunchOptions lo;
  lo.backend = o.backend;
  lo.world_size = o.ranks;
  std::vector<Measurement> results;
  int R = 0;
  std::string layout_note;
  launch(lo, [&](ParallelContext& ctx) {
    ProcessGroup& g = *ctx.world;
    const int me = g.rank();
    std::shared_ptr<HierarchicalGroup> h;
    if (o.hierarchical) {
      std::string why;
      const auto layout = node_layout(ctx.host_of_rank, me, &why);
      MT_REQUIRE(ConfigError, layout, "bench comm --hierarchical: the world cannot run hierarchically: ", why,
                 " (run it on several nodes with as many ranks on each, or name hosts with MESHTRAIN_HOST_OF_RANK)");
      h = HierarchicalGroup::create(ctx.world, *layout);
      if (me == 0) layout_note = layout->str();
    }
    std::vector<char> a(o.max_bytes), b(o.max_bytes);
    for (size_t i = 0; i < a.size(); i += 4096) a[i] = 1, b[i] = 0;  // touch every page once
    std::vector<Measurement> mine;
    for (OpKind op : o.ops)
      for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
        const int iters = iterations(o, bytes);
        const bool raw = o.backend == Backend::Mpi;
        const bool hier = h && h->hierarchical(op, DType::F32, bytes / 4);
        std::vector<double> times, raw_times, hier_times;
        // Backend and raw MPI alternate, timed the same way, so drifting
        // machine load hits both alike.
        auto timed = [&](auto&& call) {
          g.barrier();
          const auto t0 = Clock::now();
          call();
          double dt = std::chrono::duration<double>(Clock::now() - t0).count();
          g.all_reduce(&dt, 1, DType::F64, ReduceOp::Max);
          return dt;
        };
        for (int it = 0; it <= iters; ++it) {
          // Alternate which goes first so cache and page state favour neither.
          double t = 0, tr = 0, th = 0;
          if (raw && it % 2) tr = timed([&] { mpi_raw_call(op, bytes); });
          if (hier && it % 2) th = timed([&] { call_op(*h, op, bytes, a.data(), b.data()); });
          t = timed([&] { call_op(g, op, bytes, a.data(), b.data()); });
          if (raw && !(it % 2)) tr = timed([&] { mpi_raw_call(op, bytes); });
          if (hier && !(it % 2)) th = timed([&] { call_op(*h, op, bytes, a.data(), b.data()); });
          if (it == 0) continue;  // the first calls warm up
          times.push_back(t);
          raw_times.push_back(tr);
          hier_times.push_back(th);
        }
        auto median = [](std::vector<double>& v) {
          std::sort(v.begin(), v.end());
          return v[v.size() / 2];
        };
        Measurement m{op, bytes, median(times)};
        if (raw) m.raw_seconds = median(raw_times);
        if (hier) m.hier_seconds = median(hier_times);
        mine.push_back(m);
      }
    if (me == 0) {
      results = mine;
      R = g.size();
    }
  });
  if (ranks) *ranks = R;
  if (layout) *layout = layout_note;
  return results;
}

void run(const BenchOptions& o, std::FILE* out) {
  // Measured by one process only: under mpirun the other ranks are still
  // inside MPI_Init meanwhile (it runs before our first barrier).
  const char* env_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (!env_rank) env_rank = std::getenv("PMI_RANK");
  const bool measure_copy = o.backend == Backend::Threads || !env_rank || std::atoi(env_rank) == 0;
  const double copy_bw = measure_copy ? copy_bandwidth(size_t(256) << 20, hardware_cores()) : 0;
  int R = 0;
  std::string layout;
  const std::vector<Measurement> results = measure(o, &R, &layout);
  if (results.empty()) return;  // MPI ranks other than 0
  const bool mpi = o.backend == Backend::Mpi, hier = o.hierarchical;
  std::fprintf(out, "# bench comm: backend=%s ranks=%d cores=%d, f32, median of >=%d iterations (max over ranks)\n",
               mpi ? "mpi" : "threads", R, hardware_cores(), o.iters);
  std::fprintf(out, "# copy bandwidth (STREAM copy, %d threads, read+write): %.1f GB/s\n", hardware_cores(),
               copy_bw / 1e9);
  if (hier)
    std::fprintf(out, "# hierarchical (%s): reduce-scatter inside each node, all-reduce across, all-gather inside; "
                 "hier_us beside the flat time_us, alternating\n", layout.c_str());
  std::fprintf(out, "%-15s %8s %11s %9s %9s %11s %7s%s%s\n", "op", "bytes", "time_us", "algbw", "busbw", "bound_us",
               "x_bound", mpi ? "      raw_us  overhead" : "", hier ? "     hier_us  flat/hier" : "");
  for (const auto& m : results) {
    const double bound = bound_bytes(m.op, m.bytes, R) / copy_bw;
    std::fprintf(out, "%-15s %8s %11.1f %9.2f %9.2f %11.1f %7.2f", std::string(op_kind_name(m.op)).c_str(),
                 human(m.bytes).c_str(), m.seconds * 1e6, double(m.bytes) / m.seconds / 1e9,
                 double(m.bytes) / m.seconds / 1e9 * busbw_factor(m.op, R), bound * 1e6,
                 bound > 0 ? m.seconds / bound : 0.0);
    if (mpi) std::fprintf(out, " %11.1f %+8.1f%%", m.raw_seconds * 1e6, (m.seconds / m.raw_seconds - 1) * 100);
    if (hier && m.hier_seconds >= 0) std::fprintf(out, " %11.1f %9.2fx", m.hier_seconds * 1e6, m.seconds / m.hier_seconds);
    else if (hier) std::fprintf(out, " %11s %10s", "-", "-");
    std::fprintf(out, "\n");
  }
  std::fprintf(out, "# alpha-beta fit of docs/math.md (M.20), (M.23), weighted least squares:\n");
  for (OpKind op : o.ops) {
    if (R < 2) break;
    const AlphaBeta ab = fit_alpha_beta(op, R, results);
    std::fprintf(out, "#   %-15s alpha = %8.2f us   1/beta = %7.2f GB/s\n", std::string(op_kind_name(op)).c_str(),
                 ab.alpha_s * 1e6, ab.beta_s_per_byte > 0 ? 1e-9 / ab.beta_s_per_byte : 0.0);
  }
  std::fprintf(out, "# algbw = M/t, busbw = algbw*2(R-1)/R (all_reduce) or (R-1)/R; bound = bytes read+written "
                    "machine-wide / copy bandwidth\n");
}

int run_from_args(const std::vector<std::string>& args) {
  run(parse_args(args), stdout);
  return 0;
}

}  // namespace meshtrain::comm::bench
