#include "meshtrain/comm/types.h"

#include <sstream>

namespace meshtrain::comm {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

std::string_view op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::AllReduce: return "all_reduce";
    case OpKind::ReduceScatter: return "reduce_scatter";
    case OpKind::AllGather: return "all_gather";
    case OpKind::AllToAll: return "all_to_all";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::Send: return "send";
    case OpKind::Recv: return "recv";
    case OpKind::Barrier: return "barrier";
    case OpKind::Split: return "split";
  }
  return "?";
}

std::string Fingerprint::str() const {
  std::ostringstream os;
  os << op_kind_name(kind) << "(seq=" << seq << ", count=" << count << ", dtype=" << dtype_name(dtype);
  if (root >= 0) os << ", root=" << root;
  if (kind == OpKind::AllReduce || kind == OpKind::ReduceScatter) os << ", op=" << reduce_op_name(op);
  os << ")";
  return os.str();
}

}  // namespace meshtrain::comm
