#include "meshtrain/core/shape.h"

#include "meshtrain/core/error.h"

namespace meshtrain {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::vector<int64_t>(dims)) {}

Shape::Shape(const std::vector<int64_t>& dims) {
  MT_CHECK(dims.size() <= size_t(kMaxDims), "shape has ", dims.size(), " dims, max ", kMaxDims);
  for (int64_t d : dims) MT_CHECK(d >= 0, "negative dim ", d);
  rank_ = int(dims.size());
  for (int i = 0; i < rank_; ++i) dims_[i] = dims[i];
}

int64_t Shape::operator[](int i) const {
  if (i < 0) i += rank_;
  MT_CHECK(i >= 0 && i < rank_, "dim ", i, " out of range for shape ", str());
  return dims_[i];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
  return s + "]";
}

}  // namespace meshtrain
