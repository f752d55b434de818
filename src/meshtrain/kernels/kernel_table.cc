#include "meshtrain/kernels/kernel_table.h"

#include <mutex>
#include <utility>

#include "meshtrain/kernels/cpu/cpu_kernel_table.h"
#include "meshtrain/kernels/meta/meta_kernel_table.h"

namespace meshtrain::kernels {

namespace {

std::mutex registry_mu;
// Built on first use, so a kernel called from a static initializer finds it.
const KernelTable** registry() {
  static const KernelTable* tables[kNumDevices] = {&cpu_kernel_table(), nullptr, &meta_kernel_table()};
  return tables;
}

}  // namespace

const KernelTable& kernels_for(Device device) {
  std::lock_guard<std::mutex> lock(registry_mu);
  const KernelTable* t = registry()[int(device)];
  MT_REQUIRE(ConfigError, t != nullptr, "no kernels for device ", device_name(device), " in this build");
  return *t;
}

const KernelTable* register_kernels(Device device, const KernelTable* table) {
  std::lock_guard<std::mutex> lock(registry_mu);
  return std::exchange(registry()[int(device)], table);
}

}  // namespace meshtrain::kernels
