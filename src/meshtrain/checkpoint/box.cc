#include "meshtrain/checkpoint/box.h"

#include <cstring>
#include <sstream>

#include "meshtrain/comm/types.h"
#include "meshtrain/core/error.h"

namespace meshtrain::checkpoint {

int64_t Box::numel() const {
  int64_t n = 1;
  for (int64_t l : length) n *= l;
  return n;
}

std::string Box::str() const {
  std::ostringstream os;
  os << "[";
  for (size_t d = 0; d < offset.size(); ++d)
    os << (d ? ", " : "") << offset[d] << ":" << (d < length.size() ? offset[d] + length[d] : offset[d]);
  os << "]";
  return os.str();
}

Box full_box(const Shape& global) {
  Box b;
  b.offset.assign(size_t(global.rank()), 0);
  b.length = global.dims();
  return b;
}

bool box_inside(const Box& box, const Shape& global) {
  if (box.rank() != global.rank() || box.length.size() != box.offset.size()) return false;
  for (int d = 0; d < box.rank(); ++d) {
    const int64_t o = box.offset[size_t(d)], l = box.length[size_t(d)];
    if (o < 0 || l <= 0 || o > global[d] || l > global[d] - o) return false;
  }
  return true;
}

std::optional<Box> intersect(const Box& a, const Box& b) {
  MT_CHECK(a.rank() == b.rank(), "intersect: ranks ", a.rank(), " and ", b.rank());
  Box r;
  for (int d = 0; d < a.rank(); ++d) {
    const int64_t lo = std::max(a.offset[size_t(d)], b.offset[size_t(d)]);
    const int64_t hi = std::min(a.offset[size_t(d)] + a.length[size_t(d)], b.offset[size_t(d)] + b.length[size_t(d)]);
    if (hi <= lo) return std::nullopt;
    r.offset.push_back(lo);
    r.length.push_back(hi - lo);
  }
  return r;
}

namespace {

// Decomposes [begin, end) of the sub-block of `dims` starting at dim `d`,
// whose leading indices are fixed in `prefix`.
void decompose(const std::vector<int64_t>& dims, size_t d, std::vector<int64_t>& prefix, int64_t begin, int64_t end,
               std::vector<Box>& out) {
  if (begin >= end) return;
  const size_t r = dims.size();
  int64_t inner = 1;  // elements per index of dim d
  for (size_t k = d + 1; k < r; ++k) inner *= dims[k];
  auto emit_rows = [&](int64_t first, int64_t count) {
    Box b;
    b.offset = prefix;
    b.length.assign(prefix.size(), 1);
    b.offset.push_back(first);
    b.length.push_back(count);
    for (size_t k = d + 1; k < r; ++k) {
      b.offset.push_back(0);
      b.length.push_back(dims[k]);
    }
    out.push_back(std::move(b));
  };
  auto recurse_row = [&](int64_t row, int64_t b, int64_t e) {
    prefix.push_back(row);
    decompose(dims, d + 1, prefix, b, e, out);
    prefix.pop_back();
  };
  const int64_t first_full = (begin + inner - 1) / inner, end_full = end / inner;
  if (first_full >= end_full) {  // no whole row: inside one row or across one boundary
    const int64_t row = begin / inner;
    if ((end - 1) / inner == row) {
      recurse_row(row, begin - row * inner, end - row * inner);
    } else {
      recurse_row(row, begin - row * inner, inner);
      recurse_row(row + 1, 0, end - (row + 1) * inner);
    }
    return;
  }
  if (begin < first_full * inner) recurse_row(first_full - 1, begin - (first_full - 1) * inner, inner);
  emit_rows(first_full, end_full - first_full);
  if (end > end_full * inner) recurse_row(end_full, 0, end - end_full * inner);
}

}  // namespace

std::vector<Box> flat_range_to_boxes(const Shape& global, int64_t begin, int64_t end) {
  MT_REQUIRE(CheckpointError, 0 <= begin && begin <= end && end <= global.numel(), "flat range [", begin, ", ", end,
             ") outside tensor of shape ", global.str());
  std::vector<Box> out;
  if (begin == end) return out;
  if (global.rank() == 0) return {Box{}};
  std::vector<int64_t> prefix;
  decompose(global.dims(), 0, prefix, begin, end, out);
  return out;
}

std::vector<Box> balanced_part_boxes(const Shape& global, int parts, int index) {
  const size_t n = size_t(global.numel());
  const int64_t b = int64_t(comm::chunk_offset(n, parts, index));
  return flat_range_to_boxes(global, b, b + int64_t(comm::chunk_size(n, parts, index)));
}

void copy_region(const void* src, const Box& src_box, void* dst, const Box& dst_box, const Box& region,
                 size_t elem_size) {
  const char* s = static_cast<const char*>(src);
  char* t = static_cast<char*>(dst);
  for_each_segment(src_box, dst_box, region, [&](int64_t spos, int64_t dpos, int64_t n) {
    std::memcpy(t + size_t(dpos) * elem_size, s + size_t(spos) * elem_size, size_t(n) * elem_size);
  });
}

}  // namespace meshtrain::checkpoint
