#include "meshtrain/app/bench.h"

#include "meshtrain/comm/bench/comm_bench.h"
#include "meshtrain/core/error.h"

namespace meshtrain::app {

std::string size_error(const std::string& text) {
  try {
    comm::bench::parse_size(text);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

void bench_comm(const BenchCommRequest& q) {
  namespace cb = comm::bench;
  cb::BenchOptions o;
  o.backend = comm::parse_backend(q.backend);
  o.ranks = q.ranks;
  o.min_bytes = cb::parse_size(q.min_bytes);
  o.max_bytes = cb::parse_size(q.max_bytes);
  o.iters = q.iters;
  o.ops.clear();
  for (const auto& op : q.ops) o.ops.push_back(cb::parse_op(op));
  MT_REQUIRE(ConfigError, o.min_bytes >= 4 && o.min_bytes <= o.max_bytes, "bench comm: --min-bytes ", q.min_bytes,
             " must be at least 4 bytes and at most --max-bytes ", q.max_bytes);
  cb::run(o, stdout);
}

}  // namespace meshtrain::app
