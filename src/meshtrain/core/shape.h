// Tensor shape: up to kMaxDims dims, row-major.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace meshtrain {

class Shape {
 public:
  static constexpr int kMaxDims = 6;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);

  int rank() const { return rank_; }
  int64_t operator[](int i) const;  // negative i counts from the back
  int64_t numel() const;
  std::vector<int64_t> dims() const { return {dims_.begin(), dims_.begin() + rank_}; }
  bool operator==(const Shape& o) const;
  std::string str() const;  // "[2, 3]"

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int rank_ = 0;
};

}  // namespace meshtrain
