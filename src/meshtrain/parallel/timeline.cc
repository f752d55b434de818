#include "meshtrain/parallel/timeline.h"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

#include "meshtrain/core/error.h"
#include "meshtrain/core/median.h"

namespace meshtrain::parallel {

namespace {

constexpr size_t kFields = 6;

}  // namespace

double PipelineTimeline::measured_bubble() const {
  double first = std::numeric_limits<double>::max(), last = std::numeric_limits<double>::lowest(), busy = 0;
  for (const auto& stage : stages)
    for (const TimedAction& a : stage) {
      first = std::min(first, a.start);
      last = std::max(last, a.end);
      busy += a.busy;
    }
  if (stages.empty() || last <= first) return 0;
  return std::max(0.0, 1.0 - busy / (double(stages.size()) * (last - first)));
}

ChunkCosts PipelineTimeline::chunk_costs(int chunks) const {
  const size_t n = static_cast<size_t>(chunks);
  std::vector<std::vector<double>> f(n), b(n), w(n);
  std::vector<double> all_f, all_b, all_w;
  for (const auto& stage : stages)
    for (const TimedAction& a : stage) {
      MT_CHECK(a.chunk >= 0 && a.chunk < chunks, "timeline chunk ", a.chunk, " outside ", chunks);
      auto& bucket = a.op == Op::Forward ? f : a.op == Op::BackwardWeight ? w : b;
      auto& all = a.op == Op::Forward ? all_f : a.op == Op::BackwardWeight ? all_w : all_b;
      bucket[size_t(a.chunk)].push_back(a.busy);
      all.push_back(a.busy);
    }
  ChunkCosts c;
  for (int k = 0; k < chunks; ++k) {
    c.f.push_back(f[size_t(k)].empty() ? median(all_f) : median(f[size_t(k)]));
    c.b.push_back(b[size_t(k)].empty() ? median(all_b) : median(b[size_t(k)]));
    c.w.push_back(w[size_t(k)].empty() ? median(all_w) : median(w[size_t(k)]));
  }
  return c;
}

void PipelineTimeline::rebase() {
  double first = std::numeric_limits<double>::max();
  for (const auto& stage : stages)
    for (const TimedAction& a : stage) first = std::min(first, a.start);
  if (first == std::numeric_limits<double>::max()) return;  // no actions
  for (auto& stage : stages)
    for (TimedAction& a : stage) a.start -= first, a.end -= first;
  origin += first;
}

double PipelineTimeline::exposed_transfer(const std::vector<ReceiveWait>& waits) const {
  std::map<std::tuple<bool, int, int>, double> produced;  // (gradient, micro, chunk) -> end of its producer
  for (const auto& stage : stages)
    for (const TimedAction& a : stage) {
      if (a.op == Op::Forward) produced[{false, a.micro, a.chunk}] = a.end;
      if (a.op == Op::Backward || a.op == Op::BackwardInput) produced[{true, a.micro, a.chunk}] = a.end;
    }
  double exposed = 0;
  for (const ReceiveWait& w : waits) {
    const bool grad = w.op == Op::RecvGradient;
    const auto it = produced.find({grad, w.micro, peer_chunk(w.op, w.chunk)});
    if (it == produced.end()) continue;  // a timeline without the sender's actions (a recorded step's)
    const double start = w.start - origin, end = w.end - origin;
    exposed += std::max(0.0, end - std::max(start, it->second));
  }
  return exposed;
}

PipelineTimeline gather_timeline(comm::ProcessGroup& pp, const std::vector<TimedAction>& mine) {
  std::vector<double> packed;
  for (const TimedAction& a : mine)
    packed.insert(packed.end(), {double(int(a.op)), double(a.micro), double(a.chunk), a.start, a.end, a.busy});
  const size_t P = size_t(pp.size());
  std::vector<int64_t> counts(P);
  const int64_t n = int64_t(packed.size());
  pp.all_gather(&n, counts.data(), P, DType::I64);
  const size_t longest = size_t(*std::max_element(counts.begin(), counts.end()));
  packed.resize(longest, 0.0);
  std::vector<double> all(P * longest);
  pp.all_gather(packed.data(), all.data(), all.size(), DType::F64);
  PipelineTimeline t;
  t.stages.resize(P);
  for (size_t r = 0; r < P; ++r)
    for (size_t i = 0; i < size_t(counts[r]); i += kFields) {
      const double* d = all.data() + r * longest + i;
      t.stages[r].push_back({Op(int(d[0])), int(d[1]), int(d[2]), d[3], d[4], d[5]});
    }
  t.rebase();
  return t;
}

}  // namespace meshtrain::parallel
