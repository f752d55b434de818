#include "meshtrain/model/expert_exchange.h"

#include <algorithm>
#include <numeric>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/moe_routing.h"

namespace meshtrain::model {

ExpertExchange::ExpertExchange(comm::ProcessGroup* ep, const std::vector<int64_t>& begin, int64_t E)
    : ep_(ep && ep->size() > 1 ? ep : nullptr) {
  if (!ep_) {
    for (int64_t e = 0; e < E; ++e)
      if (begin[size_t(e + 1)] > begin[size_t(e)])
        blocks_.push_back({e, begin[size_t(e)], begin[size_t(e + 1)] - begin[size_t(e)], 0});
    received_rows_ = begin[size_t(E)];
    return;
  }
  const int P = ep_->size(), me = ep_->rank();
  MT_CHECK(E % P == 0, "n_experts ", E, " over ep ", P);
  const int64_t El = E / P;
  // Each peer learns the size of every block it will receive.
  std::vector<int64_t> sizes(static_cast<size_t>(E)), got(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) sizes[size_t(e)] = begin[size_t(e + 1)] - begin[size_t(e)];
  ep_->all_to_all(sizes.data(), got.data(), size_t(El), DType::I64);
  send_rows_.assign(size_t(P), 0);
  recv_rows_.assign(size_t(P), 0);
  for (int q = 0; q < P; ++q) {
    send_rows_[size_t(q)] = size_t(begin[size_t((q + 1) * El)] - begin[size_t(q * El)]);
    for (int64_t i = 0; i < El; ++i) {
      const int64_t rows = got[size_t(q * El + i)];
      if (rows > 0) blocks_.push_back({me * El + i, received_rows_, rows, q});
      received_rows_ += rows;
      recv_rows_[size_t(q)] += size_t(rows);
    }
  }
}

void ExpertExchange::exchange(const Tensor& from, const std::vector<size_t>& from_rows, const Tensor& to,
                              const std::vector<size_t>& to_rows, int64_t d, DType dtype) const {
  MT_CHECK(from.dim(0) >= int64_t(std::accumulate(from_rows.begin(), from_rows.end(), size_t(0))) &&
               to.dim(0) >= int64_t(std::accumulate(to_rows.begin(), to_rows.end(), size_t(0))),
           "expert exchange buffers smaller than their rows");
  std::vector<size_t> sc(from_rows.size()), rc(to_rows.size());
  for (size_t q = 0; q < sc.size(); ++q) sc[q] = from_rows[q] * size_t(d);
  for (size_t q = 0; q < rc.size(); ++q) rc[q] = to_rows[q] * size_t(d);
  ep_->all_to_all(from.raw(), sc, to.raw(), rc, dtype);
}

Tensor ExpertExchange::dispatch(const Tensor& mine, const std::shared_ptr<CachingAllocator>& alloc,
                                MemCategory cat) const {
  if (!ep_) return mine;
  const Tensor received = Tensor::empty(Shape{kernels::expert_rows_bucket(std::max<int64_t>(received_rows_, 1)), mine.dim(1)},
                                       mine.dtype(), alloc, cat);
  exchange(mine, send_rows_, received, recv_rows_, mine.dim(1), mine.dtype());
  return received;
}

void ExpertExchange::give_back(const Tensor& received, const Tensor& mine) const {
  if (!ep_) return;
  exchange(received, recv_rows_, mine, send_rows_, mine.dim(1), mine.dtype());
}

int64_t ExpertExchange::sent_bytes(int64_t row_bytes) const {
  int64_t rows = 0;
  if (!ep_) return 0;
  for (size_t r : send_rows_) rows += int64_t(r);
  return rows * row_bytes;
}

}  // namespace meshtrain::model
