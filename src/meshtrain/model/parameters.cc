#include "meshtrain/model/parameters.h"

#include "meshtrain/core/rng.h"

namespace meshtrain::model {

template <typename T>
void init_param_range(const ParamSpec& spec, uint64_t seed, int64_t begin, int64_t n, T* out) {
  switch (spec.init) {
    case InitKind::Ones:
      for (int64_t i = 0; i < n; ++i) out[i] = T(1);
      return;
    case InitKind::Zeros:
      for (int64_t i = 0; i < n; ++i) out[i] = T(0);
      return;
    case InitKind::Normal: {
      const CounterRng rng(seed);
      const uint64_t stream = stream_id(spec.name.c_str());
      const T std = T(spec.init_std);
#pragma omp parallel for if (n > 65536)
      for (int64_t i = 0; i < n; ++i) out[i] = T(rng.normal(stream, uint64_t(begin + i))) * std;
      return;
    }
  }
}

template <typename T>
ParameterStore<T>::ParameterStore(const ModelSpec& spec, const std::shared_ptr<CachingAllocator>& alloc)
    : spec_(spec) {
  for (const ParamUnit& u : spec_.units) {
    unit_values_.push_back(Tensor::zeros(Shape{u.numel}, dtype_of<T>, alloc, MemCategory::Params));
    unit_grads_.push_back(Tensor::zeros(Shape{u.numel}, dtype_of<T>, alloc, MemCategory::Grads));
  }
  params_.resize(spec_.params.size());
  for (size_t i = 0; i < spec_.params.size(); ++i) {
    const ParamSpec& p = spec_.params[i];
    params_[i].spec = &spec_.params[i];
    params_[i].value = unit_values_[p.unit].flat_slice(p.unit_offset, p.unit_offset + p.numel()).view(p.shape);
    params_[i].grad = unit_grads_[p.unit].flat_slice(p.unit_offset, p.unit_offset + p.numel()).view(p.shape);
  }
}

template <typename T>
void ParameterStore<T>::initialize(uint64_t seed) {
  for (auto& p : params_) init_param_range<T>(*p.spec, seed, 0, p.spec->numel(), p.value.template data<T>());
}

template <typename T>
void ParameterStore<T>::zero_grads() {
  for (auto& g : unit_grads_) g.zero_();
}

template <typename T>
Parameter& ParameterStore<T>::find(const std::string& name) {
  for (auto& p : params_)
    if (p.spec->name == name) return p;
  MT_THROW(InternalError, "no parameter named '", name, "'");
}

template class ParameterStore<float>;
template class ParameterStore<double>;
template void init_param_range<float>(const ParamSpec&, uint64_t, int64_t, int64_t, float*);
template void init_param_range<double>(const ParamSpec&, uint64_t, int64_t, int64_t, double*);

}  // namespace meshtrain::model
