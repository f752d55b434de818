#include "meshtrain/core/memory_replay.h"

#include "meshtrain/core/allocator.h"

namespace meshtrain {

SymTensor::Token::~Token() { replay->tracker_.on_free(category, bytes); }

int64_t SymTensor::bytes() const { return token_ ? token_->bytes : 0; }
int64_t SymTensor::numel() const { return token_ ? token_->numel : 0; }
DType SymTensor::dtype() const { return token_ ? token_->dtype : DType::F32; }
MemCategory SymTensor::category() const { return token_ ? token_->category : MemCategory::Other; }

SymTensor MemoryReplay::alloc(int64_t numel, DType dtype, MemCategory category) {
  const int64_t bytes = int64_t(CachingAllocator::rounded_size(size_t(numel) * dtype_size(dtype)));
  tracker_.on_alloc(category, bytes);
  SymTensor t;
  // Built in place: a temporary Token would give its bytes back on destruction.
  t.token_.reset(new SymTensor::Token{this, category, dtype, numel, bytes});
  return t;
}

SymTensor MemoryReplay::as_operand(const SymTensor& t, DType dtype, MemCategory category) {
  if (!t.defined() || t.dtype() == dtype) return t;
  return alloc(t.numel(), dtype, category);
}

}  // namespace meshtrain
