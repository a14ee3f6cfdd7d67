#include "comm/call.hpp"

#include <sstream>

#include "core/check.hpp"

namespace kizuna::comm {

const char* Call::what() const {
  switch (kind) {
    case CallKind::Send: return "send";
    case CallKind::Recv: return "recv";
    case CallKind::Collective: break;
  }
  switch (collective) {
    case algo::Collective::AllReduce: return "all_reduce";
    case algo::Collective::AllGather: return "all_gather";
    case algo::Collective::ReduceScatter: return "reduce_scatter";
    case algo::Collective::Broadcast: return "broadcast";
    case algo::Collective::Reduce: return "reduce";
    case algo::Collective::Barrier: return "barrier";
  }
  return "?";
}

namespace detail {

void invalid_call(const Call& call, int rank, int world) {
  const char* what = call.what();
  const CallRule r = rule_of(call);
  const ReduceOp op = r.uses_op ? call.op : ReduceOp::Sum;
  KIZUNA_CHECK_ARG(is_valid(call.dtype), what, ": invalid data type code ", static_cast<int>(call.dtype));
  KIZUNA_CHECK_ARG(is_valid(op), what, ": invalid reduction code ", static_cast<int>(op));
  KIZUNA_CHECK_ARG(op != ReduceOp::Avg || is_floating(call.dtype), what,
                   ": avg is defined for floating types only, not ", name(call.dtype));
  std::size_t bytes = 0;
  const std::size_t blocks = r.per_rank ? static_cast<std::size_t>(world) : 1;
  KIZUNA_CHECK_ARG(!__builtin_mul_overflow(call.count, size_of(call.dtype) * blocks, &bytes) &&
                       bytes <= static_cast<std::size_t>(PTRDIFF_MAX),
                   what, ": a count of ", call.count, " ", name(call.dtype), " elements",
                   r.per_rank ? " times the world size" : "", " is more bytes than memory holds");
  if (call.kind != CallKind::Collective) {
    const void* buffer = call.kind == CallKind::Send ? call.send : call.recv;
    KIZUNA_CHECK_ARG(buffer != nullptr || call.count == 0, what, ": buffer is null with count ", call.count);
    KIZUNA_THROW(ErrorCode::InvalidArgument, what, ": peer ", call.root, " is not another rank of a world of ",
                 world, call.kind == CallKind::Recv ? " (nor kAnySource, -1)" : "");
  }
  KIZUNA_CHECK_ARG(!r.rooted || (call.root >= 0 && call.root < world), what, ": root ", call.root,
                   " is out of range for world size ", world);
  const bool send_null = call.send == nullptr && call.count != 0;
  KIZUNA_CHECK_ARG(!send_null || !(r.send_on_all || call.root == rank), what, ": send buffer is null with count ",
                   call.count);
  KIZUNA_CHECK_ARG(!(call.recv == nullptr && call.count != 0), what, ": receive buffer is null with count ",
                   call.count);
  KIZUNA_THROW(ErrorCode::InvalidArgument, what, ": send and recv overlap without being the same buffer (",
               call.bytes(), " bytes at ", call.send, " and ", call.recv, ")");
}

}  // namespace detail

// Bits 0-3: the collective plus one (0: a point-to-point message or the
// check's exchange, which carry no call); 4-7: the type; 8-10: the
// operator where the collective reduces; 11-31: a digest of root and count.
std::uint32_t message_code(const Call& call) {
  if (call.kind != CallKind::Collective) return 0;
  const detail::CallRule r = detail::rule_of(call);
  std::uint64_t h = (static_cast<std::uint64_t>(call.count) * 0x9e3779b97f4a7c15ull) ^
                    (r.rooted ? static_cast<std::uint64_t>(call.root) + 1 : 0) * 0xc2b2ae3d27d4eb4full;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  return (static_cast<std::uint32_t>(call.collective) + 1) | (static_cast<std::uint32_t>(call.dtype) & 15) << 4 |
         (r.uses_op ? static_cast<std::uint32_t>(call.op) & 7 : 0) << 8 | static_cast<std::uint32_t>(h) << 11;
}

std::string describe_message_code(std::uint32_t theirs, std::uint32_t mine) {
  std::ostringstream out;
  const unsigned collective = theirs & 15;
  if (collective == 0 || collective > 6) {
    out << "a message of no collective";
    return out.str();
  }
  Call c;
  c.collective = static_cast<algo::Collective>(collective - 1);
  out << c.what() << " of " << name(static_cast<DataType>((theirs >> 4) & 15));
  if (detail::rule_of(c).uses_op) out << ", " << name(static_cast<ReduceOp>((theirs >> 8) & 7));
  if ((theirs & 0x7ff) == (mine & 0x7ff) && theirs != mine) out << " (another count or root)";
  return out.str();
}

}  // namespace kizuna::comm
