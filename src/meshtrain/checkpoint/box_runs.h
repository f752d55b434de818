// Implementation of for_each_run (template, included by box.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace meshtrain::checkpoint {

template <typename Fn>
void for_each_run(const Box& outer, const Box& region, Fn&& fn) {
  const int r = region.rank();
  if (r == 0) {
    fn(int64_t(0), int64_t(0), int64_t(1));
    return;
  }
  // Trailing dims where the region spans the whole outer box merge into one
  // run with the first dim (from the back) where it does not.
  int split = r - 1;
  int64_t run = region.length[r - 1];
  while (split > 0 && region.length[split] == outer.length[split]) {
    --split;
    run *= region.length[split];
  }
  std::vector<int64_t> stride(size_t(r), 1);
  for (int d = r - 2; d >= 0; --d) stride[size_t(d)] = stride[size_t(d) + 1] * outer.length[size_t(d) + 1];
  // Iterate the dims before `split` (odometer order).
  std::vector<int64_t> idx(size_t(split), 0);
  int64_t region_pos = 0;
  while (true) {
    int64_t pos = 0;
    for (int d = 0; d < r; ++d) {
      const int64_t i = d < split ? idx[size_t(d)] : 0;
      pos += (region.offset[size_t(d)] - outer.offset[size_t(d)] + i) * stride[size_t(d)];
    }
    fn(pos, region_pos, run);
    region_pos += run;
    int d = split - 1;
    for (; d >= 0; --d) {
      if (++idx[size_t(d)] < region.length[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
    if (d < 0) break;
  }
}

}  // namespace meshtrain::checkpoint

namespace meshtrain::checkpoint {

// Walks `region` (inside both boxes) in flat order and calls
// fn(src element pos, dst element pos, n) for every maximal segment that is
// contiguous both in a row-major `src_box` buffer and a `dst_box` buffer.
template <typename Fn>
void for_each_segment(const Box& src_box, const Box& dst_box, const Box& region, Fn&& fn) {
  std::vector<std::pair<int64_t, int64_t>> dst_runs;  // (dst pos, region pos), equal lengths
  int64_t dst_len = 0;
  for_each_run(dst_box, region, [&](int64_t pos, int64_t rpos, int64_t len) {
    dst_runs.push_back({pos, rpos});
    dst_len = len;
  });
  for_each_run(src_box, region, [&](int64_t spos, int64_t rpos, int64_t len) {
    int64_t done = 0;
    while (done < len) {
      const int64_t rp = rpos + done;
      const auto& dr = dst_runs[size_t(rp / dst_len)];
      const int64_t within = rp - dr.second;
      const int64_t n = std::min(len - done, dst_len - within);
      fn(spos + done, dr.first + within, n);
      done += n;
    }
  });
}

}  // namespace meshtrain::checkpoint
