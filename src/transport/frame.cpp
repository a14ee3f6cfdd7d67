#include "transport/frame.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/check.hpp"

namespace kizuna::transport {
namespace {

// Little-endian on the wire. On a little-endian host that is the value's
// own bytes: one load or store, where a loop over the bytes stays a loop at
// -O2 (a frame header is encoded and decoded on every message).
template <typename T>
void put(unsigned char* p, T value) {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(p, &value, sizeof(T));
  } else {
    for (std::size_t i = 0; i < sizeof(T); ++i)
      p[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(value) >> (8 * i));
  }
}

template <typename T>
T get(const unsigned char* p) {
  if constexpr (std::endian::native == std::endian::little) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
  } else {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
    return static_cast<T>(v);
  }
}

}  // namespace

HelloBytes encode_hello(const Hello& hello) {
  HelloBytes b{};
  put<std::uint32_t>(b.data(), kHelloMagic);
  put<std::uint16_t>(b.data() + 4, kWireVersion);
  put<std::uint16_t>(b.data() + 6, 0);
  put<std::uint64_t>(b.data() + 8, hello.comm_id);
  put<std::uint32_t>(b.data() + 16, static_cast<std::uint32_t>(hello.rank));
  put<std::uint32_t>(b.data() + 20, static_cast<std::uint32_t>(hello.world_size));
  put<std::uint64_t>(b.data() + 24, hello.incarnation);
  return b;
}

Hello decode_hello(const unsigned char* b) {
  const auto magic = get<std::uint32_t>(b);
  if (magic != kHelloMagic)
    KIZUNA_THROW(ErrorCode::Mismatch, "not a kizuna handshake (magic 0x", std::hex, magic, ")");
  const auto version = get<std::uint16_t>(b + 4);
  if (version != kWireVersion)
    KIZUNA_THROW(ErrorCode::Mismatch, "kizuna wire version ", version, ", this build speaks ",
                 kWireVersion);
  Hello h;
  h.comm_id = get<std::uint64_t>(b + 8);
  h.rank = static_cast<std::int32_t>(get<std::uint32_t>(b + 16));
  h.world_size = static_cast<std::int32_t>(get<std::uint32_t>(b + 20));
  h.incarnation = get<std::uint64_t>(b + 24);
  return h;
}

std::string hello_refusal(const Hello& self, const Hello& peer,
                          const std::map<int, std::uint64_t>& expected) {
  if (peer.comm_id != self.comm_id) return "it belongs to another communicator";
  if (peer.world_size != self.world_size)
    return "it belongs to a world of " + std::to_string(peer.world_size) + " ranks, not " +
           std::to_string(self.world_size);
  if (peer.rank < 0 || peer.rank >= self.world_size)
    return "rank " + std::to_string(peer.rank) + " is outside the world of " +
           std::to_string(self.world_size);
  const auto it = expected.find(peer.rank);
  if (it == expected.end()) return "rank " + std::to_string(peer.rank) + " is not expected here";
  if (peer.incarnation != it->second)
    return "it is a stale process for rank " + std::to_string(peer.rank);
  return "";
}

HeaderBytes encode_header(const FrameHeader& h) {
  HeaderBytes b{};
  put<std::uint32_t>(b.data(), kFrameMagic);
  b[4] = static_cast<unsigned char>(h.kind);
  put<std::uint64_t>(b.data() + 8, h.tag.seq);
  put<std::uint32_t>(b.data() + 16, h.tag.index);
  put<std::uint32_t>(b.data() + 20, h.tag.call);
  put<std::uint64_t>(b.data() + 24, h.bytes);
  return b;
}

FrameHeader decode_header(const unsigned char* b) {
  const auto magic = get<std::uint32_t>(b);
  if (magic != kFrameMagic)
    KIZUNA_THROW(ErrorCode::Mismatch, "corrupt stream: frame magic 0x", std::hex, magic);
  FrameHeader h;
  const unsigned kind = b[4];
  if (kind != static_cast<unsigned>(FrameKind::Data) && kind != static_cast<unsigned>(FrameKind::Abort))
    KIZUNA_THROW(ErrorCode::Mismatch, "corrupt stream: frame kind ", kind);
  h.kind = static_cast<FrameKind>(kind);
  h.tag.seq = get<std::uint64_t>(b + 8);
  h.tag.index = get<std::uint32_t>(b + 16);
  h.tag.call = get<std::uint32_t>(b + 20);
  h.bytes = get<std::uint64_t>(b + 24);
  if (h.bytes > kMaxPayloadBytes || (h.kind == FrameKind::Abort && h.bytes > 9 + kMaxAbortText))
    KIZUNA_THROW(ErrorCode::Mismatch, "corrupt stream: frame of ", h.bytes, " bytes");
  return h;
}

std::vector<unsigned char> encode_abort(const AbortNotice& n) {
  const std::size_t text = std::min(n.message.size(), kMaxAbortText);
  std::vector<unsigned char> out(9 + text);
  put<std::uint32_t>(out.data(), static_cast<std::uint32_t>(n.origin));
  put<std::uint32_t>(out.data() + 4, static_cast<std::uint32_t>(n.lost_rank));
  out[8] = static_cast<unsigned char>(n.code);
  std::memcpy(out.data() + 9, n.message.data(), text);
  return out;
}

AbortNotice decode_abort(const unsigned char* b, std::size_t size) {
  AbortNotice n;
  if (size < 9) {
    n.message = "truncated abort notice";
    return n;
  }
  n.origin = static_cast<int>(static_cast<std::int32_t>(get<std::uint32_t>(b)));
  n.lost_rank = static_cast<int>(static_cast<std::int32_t>(get<std::uint32_t>(b + 4)));
  const unsigned code = b[8];
  n.code = code <= static_cast<unsigned>(ErrorCode::Internal) ? static_cast<ErrorCode>(code)
                                                               : ErrorCode::Aborted;
  n.message.assign(reinterpret_cast<const char*>(b + 9), std::min(size - 9, kMaxAbortText));
  return n;
}

}  // namespace kizuna::transport
