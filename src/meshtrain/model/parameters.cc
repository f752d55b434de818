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
ParameterStore<T>::ParameterStore(const ModelSpec& spec, const std::shared_ptr<CachingAllocator>& alloc,
                                  bool materialize)
    : spec_(spec), unit_values_(spec_.units.size()), unit_grads_(spec_.units.size()) {
  params_.resize(spec_.params.size());
  for (size_t i = 0; i < spec_.params.size(); ++i) params_[i].spec = &spec_.params[i];
  if (!materialize) return;
  for (int u = 0; u < num_units(); ++u) {
    const int64_t n = spec_.units[u].numel;
    bind_unit_values(u, Tensor::zeros(Shape{n}, dtype_of<T>, alloc, MemCategory::Params));
    bind_unit_grads(u, Tensor::zeros(Shape{n}, dtype_of<T>, alloc, MemCategory::Grads));
  }
}

template <typename T>
void ParameterStore<T>::bind(const std::vector<int>& members, const std::vector<ParamSpec>& specs,
                             const Tensor& flat, std::vector<Parameter>& params, Tensor Parameter::*field) {
  for (int i : members) {
    const ParamSpec& p = specs[i];
    params[i].*field =
        flat.defined() ? flat.flat_slice(p.unit_offset, p.unit_offset + p.numel()).view(p.shape) : Tensor();
  }
}

template <typename T>
void ParameterStore<T>::bind_unit_values(int u, const Tensor& flat) {
  const int64_t n = spec_.units[u].numel;
  MT_CHECK(!flat.defined() || flat.numel() >= n, "unit ", u, " needs ", n, " elements");
  unit_values_[u] = flat.defined() ? flat.flat_slice(0, n) : Tensor();
  bind(spec_.units[u].params, spec_.params, unit_values_[u], params_, &Parameter::value);
}

template <typename T>
void ParameterStore<T>::bind_unit_grads(int u, const Tensor& flat) {
  const int64_t n = spec_.units[u].numel;
  MT_CHECK(!flat.defined() || flat.numel() >= n, "unit ", u, " needs ", n, " elements");
  unit_grads_[u] = flat.defined() ? flat.flat_slice(0, n) : Tensor();
  bind(spec_.units[u].params, spec_.params, unit_grads_[u], params_, &Parameter::grad);
}

template <typename T>
void ParameterStore<T>::initialize(uint64_t seed) {
  for (auto& p : params_)
    if (p.value.defined()) init_param_range<T>(*p.spec, seed, 0, p.spec->numel(), p.value.template data<T>());
}

template <typename T>
void ParameterStore<T>::zero_grads() {
  for (auto& g : unit_grads_)
    if (g.defined()) g.zero_();
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
