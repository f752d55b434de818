#include "meshtrain/plan/link_bench.h"

#include <algorithm>
#include <chrono>

#include "meshtrain/core/error.h"
#include "meshtrain/core/median.h"
#include "meshtrain/plan/formulas.h"

namespace meshtrain::plan {

namespace {

using Clock = std::chrono::steady_clock;

// One call of `op` with M = bytes of f32 on `g`.
void call(comm::ProcessGroup& g, comm::OpKind op, size_t bytes, float* a, float* b) {
  const size_t n = bytes / sizeof(float);
  const int R = g.size(), me = g.rank();
  switch (op) {
    case comm::OpKind::AllReduce: g.all_reduce(a, b, n, DType::F32); break;
    case comm::OpKind::ReduceScatter: g.reduce_scatter(a, b, n, DType::F32); break;
    case comm::OpKind::AllGather: g.all_gather(a, b, n, DType::F32); break;
    case comm::OpKind::Send: {
      comm::Work out = g.isend(a, n, DType::F32, (me + 1) % R);
      comm::Work in = g.irecv(b, n, DType::F32, (me + R - 1) % R);
      out.wait();
      in.wait();
      break;
    }
    default: MT_THROW(ConfigError, "time_link: ", comm::op_kind_name(op), " is not priced per link");
  }
}

}  // namespace

const std::vector<comm::OpKind>& priced_ops() {
  static const std::vector<comm::OpKind> ops = {comm::OpKind::AllReduce, comm::OpKind::ReduceScatter,
                                                comm::OpKind::AllGather, comm::OpKind::Send};
  return ops;
}

std::vector<LinkSample> time_link(comm::ProcessGroup& g, comm::ProcessGroup& start, const LinkBenchOptions& o) {
  std::vector<float> a(o.max_bytes / sizeof(float), 1.0f), b(o.max_bytes / sizeof(float), 0.0f);
  std::vector<LinkSample> out;
  for (comm::OpKind op : priced_ops())
    for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
      const int reps = std::clamp(int(o.bytes_per_size / bytes), o.iters, 20);
      std::vector<double> times;
      for (int it = 0; it <= reps; ++it) {
        // The group's own barrier after the job's: a rank late out of a
        // barrier across the link must not count in an op inside a node.
        start.barrier();
        g.barrier();
        const auto t0 = Clock::now();
        call(g, op, bytes, a.data(), b.data());
        double dt = std::chrono::duration<double>(Clock::now() - t0).count();
        g.all_reduce(&dt, 1, DType::F64, comm::ReduceOp::Max);
        if (it > 0) times.push_back(dt);  // the first call warms up
      }
      out.push_back({op, bytes, median(times)});
    }
  return out;
}

AlphaBeta fit_link(comm::OpKind op, int R, const std::vector<LinkSample>& samples) {
  std::vector<const LinkSample*> mine;
  for (const LinkSample& s : samples)
    if (s.op == op && s.seconds > 0) mine.push_back(&s);
  AlphaBeta ab;
  if (mine.empty() || R < 2) return ab;
  std::sort(mine.begin(), mine.end(), [](auto* a, auto* b) { return a->bytes < b->bytes; });
  // The line t = rounds alpha + wire beta through the fastest of the three
  // smallest messages (whose bytes take next to nothing: a busy machine's
  // delay of one cannot set the latency), its slope the least squares fit
  // of the others, which the largest decide.
  const LinkSample* anchor = *std::min_element(mine.begin(), mine.begin() + long(std::min<size_t>(3, mine.size())),
                                               [](auto* a, auto* b) { return a->seconds < b->seconds; });
  const double x0 = ring_wire_bytes(op, R, double(anchor->bytes)), t0 = anchor->seconds;
  double sxx = 0, sxt = 0;
  for (const LinkSample* s : mine) {
    const double x = ring_wire_bytes(op, R, double(s->bytes)) - x0;
    sxx += x * x;
    sxt += x * (s->seconds - t0);
  }
  // Noise larger than the sizes' differences (a fast link measured to small
  // sizes): the largest message's bytes over its time.
  const LinkSample& largest = *mine.back();
  const double beta = sxx > 0 && sxt > 0 ? sxt / sxx
                                         : largest.seconds / ring_wire_bytes(op, R, double(largest.bytes));
  ab.bytes_per_s = 1.0 / beta;
  ab.alpha_s = std::max((t0 - beta * x0) / ring_rounds(op, R), 1e-7);
  return ab;
}

}  // namespace meshtrain::plan
