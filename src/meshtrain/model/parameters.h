// Parameter storage: one flat value buffer and one flat gradient buffer per
// unit (FSDP-style), each parameter a view into them. Initialization is a
// pure function of (seed, parameter name, element index) via the counter
// RNG, so any sharding of a parameter initializes identically.
//
// The store either owns its buffers (materialize = true: the single-rank
// case) or leaves them to a parallel engine that binds, releases and
// re-binds unit buffers (ZeRO: gathered parameters, transient gradients).
#pragma once

#include <memory>
#include <vector>

#include "meshtrain/core/tensor.h"
#include "meshtrain/model/param_spec.h"

namespace meshtrain::model {

struct Parameter {
  const ParamSpec* spec = nullptr;
  Tensor value;  // view into the unit's flat value buffer
  Tensor grad;   // view into the unit's flat grad buffer
};

template <typename T>
class ParameterStore {
 public:
  ParameterStore(const ModelSpec& spec, const std::shared_ptr<CachingAllocator>& alloc, bool materialize = true);
  ParameterStore(const ParameterStore&) = delete;
  ParameterStore& operator=(const ParameterStore&) = delete;

  void initialize(uint64_t seed);  // every bound value buffer
  void zero_grads();               // every bound grad buffer

  // Points unit `u`'s parameter views at `flat` (numel >= the unit's; extra
  // elements are padding). An undefined tensor unbinds.
  void bind_unit_values(int u, const Tensor& flat);
  void bind_unit_grads(int u, const Tensor& flat);

  const ModelSpec& spec() const { return spec_; }
  Parameter& get(int index) { return params_[index]; }
  const Parameter& get(int index) const { return params_[index]; }
  Parameter& find(const std::string& name);
  int size() const { return int(params_.size()); }
  Tensor& unit_values(int unit) { return unit_values_[unit]; }
  Tensor& unit_grads(int unit) { return unit_grads_[unit]; }
  int num_units() const { return int(spec_.units.size()); }

 private:
  ModelSpec spec_;
  std::vector<Tensor> unit_values_, unit_grads_;
  std::vector<Parameter> params_;
  static void bind(const std::vector<int>& members, const std::vector<ParamSpec>& specs, const Tensor& flat,
                   std::vector<Parameter>& params, Tensor Parameter::*field);
};

// Fills `out` with parameter `spec`'s initial values for its flat element
// range [begin, begin + n).
template <typename T>
void init_param_range(const ParamSpec& spec, uint64_t seed, int64_t begin, int64_t n, T* out);

}  // namespace meshtrain::model
