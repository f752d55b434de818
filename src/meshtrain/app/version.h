// `meshtrain --version`: what this binary is and what it runs on.
#pragma once

#include <string>

namespace meshtrain::app {

struct VersionInfo {
  std::string version;     // project version
  std::string git_commit;  // at build time ("unknown" outside a git checkout)
  std::string build_type;  // CMAKE_BUILD_TYPE
  std::string isa_kernels;  // the level the kernels run at (kernels/cpu/isa.h), and why
  std::string isa_cpu;      // what this CPU offers
  std::string cpu_model;
  std::string gemm;  // which f32 GEMM runs and what its bits depend on (kernels/cpu/gemm.h)
  std::string onednn, mpi;
};
VersionInfo version_info();
std::string version_text(const VersionInfo& v);  // several "key: value" lines

}  // namespace meshtrain::app
