// transport/frame.hpp: the bytes that cross a TCP link, encoded and decoded
// by pure functions (no sockets), so they are unit-tested and fuzzed alone.
//
// Every integer is little-endian; nothing is sent as a raw struct.
//
// Handshake (both directions, 32 bytes; docs/wire-protocol.md):
//   0  u32 magic 'KZHS' (0x53485a4b)   4  u16 version   6  u16 flags (0)
//   8  u64 communicator id            16  i32 rank     20  i32 world size
//  24  u64 incarnation (random per communicator object; refuses stale peers)
//
// Frame header (32 bytes), then `bytes` of payload:
//   0  u32 magic 'KZFR' (0x52465a4b)   4  u8 kind (1 data, 2 abort)   5..7 zero
//   8  u64 collective sequence        16  u32 message index   20  u32 call code
//  24  u64 payload bytes
// An abort payload: i32 origin, i32 lost rank, u8 error code, then the
// message text (at most kMaxAbortText bytes).
#pragma once

#include <kizuna/error.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "transport/link.hpp"

namespace kizuna::transport {

inline constexpr std::uint32_t kHelloMagic = 0x53485a4bu;  // "KZHS"
inline constexpr std::uint32_t kFrameMagic = 0x52465a4bu;  // "KZFR"
inline constexpr std::uint16_t kWireVersion = 2;
inline constexpr std::size_t kHelloBytes = 32;
inline constexpr std::size_t kFrameHeaderBytes = 32;
inline constexpr std::size_t kMaxAbortText = 4096;
inline constexpr std::uint64_t kMaxPayloadBytes = 1ull << 40;

struct Hello {
  std::uint64_t comm_id = 0;
  std::int32_t rank = -1;
  std::int32_t world_size = 0;
  std::uint64_t incarnation = 0;
};

enum class FrameKind : std::uint8_t { Data = 1, Abort = 2 };

struct FrameHeader {
  FrameKind kind = FrameKind::Data;
  MessageTag tag;
  std::uint64_t bytes = 0;
};

using HelloBytes = std::array<unsigned char, kHelloBytes>;
using HeaderBytes = std::array<unsigned char, kFrameHeaderBytes>;

HelloBytes encode_hello(const Hello& hello);
// Throws Mismatch naming what is wrong: not kizuna, another version.
Hello decode_hello(const unsigned char* bytes);

// Why a rank (`self`) refuses a peer's decoded Hello, or "" to accept it:
// another communicator or world size, a rank outside the world or not in
// `expected` (rank -> the incarnation that rank published), or a stale
// incarnation. Pure, so the accepting and the connecting side share it and
// the fuzzer runs it on every Hello it decodes.
std::string hello_refusal(const Hello& self, const Hello& peer,
                          const std::map<int, std::uint64_t>& expected);

HeaderBytes encode_header(const FrameHeader& header);
// Throws Mismatch for a bad magic, kind or size: the stream is not ours or
// is corrupt.
FrameHeader decode_header(const unsigned char* bytes);

std::vector<unsigned char> encode_abort(const AbortNotice& notice);
AbortNotice decode_abort(const unsigned char* bytes, std::size_t size);

}  // namespace kizuna::transport
