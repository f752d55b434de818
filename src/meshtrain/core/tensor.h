// Contiguous tensor with shared storage. Views (reshape, slices along the
// leading dim) share storage with their base. Storage comes from a rank's
// CachingAllocator and is tagged with a memory category, or wraps external
// memory (not owned, not accounted).
#pragma once

#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "meshtrain/core/allocator.h"
#include "meshtrain/core/dtype.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/shape.h"

namespace meshtrain {

class Storage {
 public:
  Storage(std::shared_ptr<CachingAllocator> alloc, size_t bytes, MemCategory cat);
  Storage(void* external, size_t bytes);  // not owned
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  MemCategory category() const { return cat_; }
  Device device() const { return alloc_ ? alloc_->device() : Device::Cpu; }
  const CachingAllocator* allocator() const { return alloc_.get(); }

 private:
  std::shared_ptr<CachingAllocator> alloc_;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  MemCategory cat_ = MemCategory::Other;
};

class Tensor {
 public:
  Tensor() = default;
  // Uninitialized memory from `alloc`.
  static Tensor empty(const Shape& shape, DType dtype, const std::shared_ptr<CachingAllocator>& alloc,
                      MemCategory cat);
  static Tensor zeros(const Shape& shape, DType dtype, const std::shared_ptr<CachingAllocator>& alloc,
                      MemCategory cat);
  // Wraps caller-owned host memory; the caller keeps it alive.
  static Tensor wrap(void* data, const Shape& shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i]; }
  int rank() const { return shape_.rank(); }
  DType dtype() const { return dtype_; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  MemCategory category() const { return storage_ ? storage_->category() : MemCategory::Other; }
  // Where the memory lives (wrapped external memory is host memory).
  Device device() const { return storage_ ? storage_->device() : Device::Cpu; }

  void* raw() const { return static_cast<char*>(storage_->data()) + offset_; }
  template <typename T> T* data() const {
    MT_CHECK(defined(), "data() on an undefined tensor");
    MT_CHECK(dtype_of<T> == dtype_, "tensor is ", dtype_name(dtype_), ", accessed as ", dtype_name(dtype_of<T>));
    MT_CHECK(device() != Device::Meta, "host access to a meta tensor ", shape_.str(),
             ": code that reads values must go through the kernel table");
    return static_cast<T*>(raw());
  }
  template <typename T> std::span<T> span() const { return {data<T>(), size_t(numel())}; }

  // Same storage, new shape with equal numel.
  Tensor view(const Shape& shape) const;
  // Rows [begin, end) of the leading dim, sharing storage.
  Tensor slice(int64_t begin, int64_t end) const;
  // Flat elements [begin, end) as a 1-D view.
  Tensor flat_slice(int64_t begin, int64_t end) const;

  void zero_() const;
  void copy_from(const Tensor& src) const;  // same dtype, numel and device
  bool shares_storage(const Tensor& o) const { return storage_ == o.storage_; }

 private:
  const DeviceMemory& memory() const;
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::F32;
};

// Test and tool helper: a tensor owning a copy of `values` (wrapping a
// heap vector kept alive by the storage).
template <typename T>
Tensor tensor_from(const std::vector<T>& values, const Shape& shape, const std::shared_ptr<CachingAllocator>& alloc) {
  MT_CHECK(int64_t(values.size()) == shape.numel(), "tensor_from: ", values.size(), " values for shape ", shape.str());
  Tensor t = Tensor::empty(shape, dtype_of<T>, alloc, MemCategory::Other);
  if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size() * sizeof(T));
  return t;
}
template <typename T>
std::vector<T> to_vector(const Tensor& t) {
  auto s = t.span<T>();
  return {s.begin(), s.end()};
}

}  // namespace meshtrain
