#include "meshtrain/core/tensor.h"

#include "meshtrain/core/host_pages.h"

namespace meshtrain {

Storage::Storage(std::shared_ptr<CachingAllocator> alloc, size_t bytes, MemCategory cat)
    : alloc_(std::move(alloc)), bytes_(bytes), cat_(cat) {
  ptr_ = alloc_->allocate(bytes, cat);
}

Storage::Storage(void* external, size_t bytes) : ptr_(external), bytes_(bytes) {}

Storage::~Storage() {
  if (alloc_) alloc_->deallocate(ptr_, bytes_, cat_);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, const std::shared_ptr<CachingAllocator>& alloc,
                     MemCategory cat) {
  MT_CHECK(alloc != nullptr, "Tensor::empty needs an allocator");
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(alloc, size_t(shape.numel()) * dtype_size(dtype), cat);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, const std::shared_ptr<CachingAllocator>& alloc,
                     MemCategory cat) {
  Tensor t = empty(shape, dtype, alloc, cat);
  t.zero_();
  return t;
}

Tensor Tensor::wrap(void* data, const Shape& shape, DType dtype) {
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(data, size_t(shape.numel()) * dtype_size(dtype));
  return t;
}

Tensor Tensor::view(const Shape& shape) const {
  MT_CHECK(shape.numel() == numel(), "view ", shape.str(), " of ", shape_.str(), ": numel differs");
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  MT_CHECK(rank() >= 1 && 0 <= begin && begin <= end && end <= dim(0), "slice [", begin, ", ", end,
           ") of ", shape_.str());
  auto dims = shape_.dims();
  const int64_t row = dims[0] ? numel() / dims[0] : 0;
  dims[0] = end - begin;
  Tensor t = *this;
  t.shape_ = Shape(dims);
  t.offset_ += size_t(begin * row) * dtype_size(dtype_);
  return t;
}

Tensor Tensor::flat_slice(int64_t begin, int64_t end) const {
  MT_CHECK(0 <= begin && begin <= end && end <= numel(), "flat_slice [", begin, ", ", end, ") of ", numel());
  Tensor t = *this;
  t.shape_ = Shape{end - begin};
  t.offset_ += size_t(begin) * dtype_size(dtype_);
  return t;
}

void Tensor::zero_() const {
  if (numel()) memory().zero(raw(), nbytes());
}

const DeviceMemory& Tensor::memory() const {
  static const DeviceMemory host{nullptr, nullptr, nullptr, host_zero, host_copy};
  return storage_->allocator() ? storage_->allocator()->memory() : host;  // wrapped memory is the host's
}

void Tensor::copy_from(const Tensor& src) const {
  MT_CHECK(src.dtype_ == dtype_ && src.numel() == numel(), "copy_from: ", dtype_name(src.dtype_),
           src.shape_.str(), " into ", dtype_name(dtype_), shape_.str());
  MT_CHECK(src.device() == device(), "copy_from: a ", device_name(src.device()), " tensor into a ",
           device_name(device()), " one");
  if (numel()) memory().copy(raw(), src.raw(), nbytes());
}

}  // namespace meshtrain
