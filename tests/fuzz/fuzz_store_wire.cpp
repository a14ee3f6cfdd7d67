// libFuzzer target: the store's request parser, as the server runs it on
// bytes from the network (and the client on the server's replies).
//
// Input layout: byte 0 picks the size of the pieces the stream is fed in
// (1..64 bytes, or all at once), so that every split of a frame across
// reads is explored; byte 1 picks the limits (the handshake's 256-byte
// frames, or 64 KiB values); the rest is the byte stream.
//
// Checked beyond "no crash, no leak, no undefined behaviour" (the
// sanitizers): a request or reply that decodes re-encodes to exactly the
// same frame, and FrameReader never buffers more than a frame and a piece.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>

#include "store/wire.hpp"

using namespace kizuna::store::wire;

namespace {

void check(bool condition) {
  if (!condition) std::abort();
}

Bytes frame_bytes(const Header& h, std::span<const std::uint8_t> body) {
  Bytes out(kHeaderBytes);
  encode_header(h, out.data());
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

void decode_everything(const Header& h, std::span<const std::uint8_t> body, const Limits& limits) {
  std::string error;
  Request request;
  if (decode(h, body, limits, request, error)) {
    Bytes again;
    encode(request, again);
    check(again == frame_bytes(h, body));  // canonical: one encoding per request
  }
  Reply reply;
  if (decode(h, body, limits, reply, error)) {
    Bytes again;
    encode(reply, again);
    check(again == frame_bytes(h, body));
  }
  Hello hello;
  decode(h, body, hello, error);
  AuthRequest auth;
  decode(h, body, auth, error);
  AuthOk ok;
  decode(h, body, ok, error);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t piece = data[0] == 0 ? size : 1 + data[0] % 64;
  Limits limits;
  limits.max_value_bytes = 64 << 10;
  const std::uint64_t max_body = (data[1] & 1) ? kMaxHandshakeBodyBytes : limits.max_body_bytes();
  data += 2;
  size -= 2;

  FrameReader reader(max_body);
  for (std::size_t pos = 0; pos < size; pos += piece) {
    const std::size_t n = std::min(piece, size - pos);
    auto space = reader.prepare(n);
    check(space.size() >= n);
    std::memcpy(space.data(), data + pos, n);
    reader.commit(n);
    for (;;) {
      Header h;
      std::span<const std::uint8_t> body;
      std::string error;
      const auto result = reader.next(h, body, error);
      if (result == FrameReader::Result::Error) {
        check(!error.empty());
        return 0;  // the server closes the connection here
      }
      if (result == FrameReader::Result::NeedMore) break;
      check(body.size() == h.body_bytes && h.body_bytes <= max_body);
      decode_everything(h, body, limits);
    }
    check(reader.buffered() <= kHeaderBytes + max_body + piece);
  }
  return 0;
}
