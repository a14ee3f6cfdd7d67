// comm/call.hpp: one call as the user made it, its argument checks, and
// the code its messages carry.
//
// Every entry point (the host and device overloads of Communicator, and
// through them the C ABI and the torch plugin) describes its call as a Call
// and checks it with validate(): one rule per collective, in one table
// (kRules in call.cpp). The test is inline and the message out of line, so
// a call that passes pays a few instructions (the throw's arguments spilled
// to the stack would cost every all-reduce about 150).
//
// message_code() is a 32-bit digest of what every rank must agree on
// (collective, type, operator, root, count), carried in every message of
// the call (transport::MessageTag::call). A rank that receives a message
// of another call fails with Mismatch naming both, rather than taking the
// bytes: without KIZUNA_CHECK, a mismatched call never returns success on a
// rank that heard from a peer in another call.
#pragma once

#include <kizuna/types.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

#include "algo/schedule.hpp"
#include "comm/route.hpp"

namespace kizuna::comm {

struct Call {
  CallKind kind = CallKind::Collective;
  algo::Collective collective = algo::Collective::AllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;  // elements: per rank for all_gather's input and reduce_scatter's output
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;           // broadcast and reduce; the peer of a send or receive

  std::size_t bytes() const { return count * size_of(dtype); }
  const char* what() const;  // "all_reduce", "send", ...
};

namespace detail {

// Which buffers a call reads and writes, on which ranks, and how many
// blocks of `count` they hold.
struct CallRule {
  bool uses_op;
  bool rooted;       // root (or the peer) must be another valid rank, or any for a collective
  bool send_on_all;  // else only on the root (broadcast), or never (recv)
  bool recv_on_all;  // else only on the root (reduce), or never (send)
  bool per_rank;     // the buffers hold world blocks of count
};

constexpr CallRule rule_of(const Call& call) {
  if (call.kind == CallKind::Send) return {false, true, true, false, false};
  if (call.kind == CallKind::Recv) return {false, true, false, true, false};
  switch (call.collective) {
    case algo::Collective::AllReduce: return {true, false, true, true, false};
    case algo::Collective::Broadcast: return {false, true, false, true, false};
    case algo::Collective::Reduce: return {true, true, true, false, false};
    case algo::Collective::AllGather: return {false, false, true, true, true};
    case algo::Collective::ReduceScatter: return {true, false, true, true, true};
    case algo::Collective::Barrier: return {false, false, false, false, false};
  }
  return {};
}

// An all-reduce's buffers are the same or apart: one that overlaps its
// output partly would read what it has already written.
inline bool overlap(const Call& call) {
  const auto a = reinterpret_cast<std::uintptr_t>(call.send), b = reinterpret_cast<std::uintptr_t>(call.recv);
  const std::size_t n = call.count * size_of(call.dtype);
  return a != b && a < b + n && b < a + n;
}

[[noreturn, gnu::cold, gnu::noinline]] void invalid_call(const Call& call, int rank, int world);

inline bool call_is_valid(const Call& call, int rank, int world) {
  const CallRule r = rule_of(call);
  const ReduceOp op = r.uses_op ? call.op : ReduceOp::Sum;
  if (!is_valid(call.dtype) || !is_valid(op) || (op == ReduceOp::Avg && !is_floating(call.dtype))) return false;
  // A multiplication, not a division: this is on every call's path.
  std::size_t bytes = 0;
  const std::size_t blocks = r.per_rank ? static_cast<std::size_t>(world) : 1;
  if (__builtin_mul_overflow(call.count, size_of(call.dtype) * blocks, &bytes) ||
      bytes > static_cast<std::size_t>(PTRDIFF_MAX))
    return false;
  if (r.rooted && !(call.kind == CallKind::Recv && call.root == kAnySource)) {
    if (call.root < 0 || call.root >= world) return false;
    if (call.kind != CallKind::Collective && call.root == rank) return false;
  }
  const bool root_here = call.kind == CallKind::Collective && r.rooted && call.root == rank;
  const bool send_here = r.send_on_all ? call.kind != CallKind::Recv : root_here && call.collective == algo::Collective::Broadcast;
  const bool recv_here = r.recv_on_all ? call.kind != CallKind::Send : root_here && call.collective == algo::Collective::Reduce;
  if (call.count != 0 && ((send_here && call.send == nullptr) || (recv_here && call.recv == nullptr))) return false;
  return call.collective != algo::Collective::AllReduce || call.kind != CallKind::Collective || !overlap(call);
}

}  // namespace detail

// Throws InvalidArgument naming the call and what is wrong with it: an
// invalid type or operator, Avg on integers, a count whose bytes overflow,
// a null buffer with a count, a root or peer out of range, an all-reduce
// whose buffers overlap without being the same.
inline void validate(const Call& call, int rank, int world) {
  if (!detail::call_is_valid(call, rank, world)) [[unlikely]]
    detail::invalid_call(call, rank, world);
}

std::uint32_t message_code(const Call& call);
// "broadcast of float32 (another count or root)" when `theirs` differs
// from `mine`, for a Mismatch message.
std::string describe_message_code(std::uint32_t theirs, std::uint32_t mine);

}  // namespace kizuna::comm
