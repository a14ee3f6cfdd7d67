// store/wire.hpp: the TcpStore wire format, encoded and decoded without any
// I/O (docs/store-protocol.md describes it byte by byte).
//
// Every message is a frame: a 16-byte header (magic "KZST", version, opcode,
// status, flags, request id, body length; integers little-endian) and a body
// of length-prefixed fields. The server and the client both read frames
// through a FrameReader, which validates each header as soon as its bytes
// arrive (bad magic or version after the first bytes, an oversize length
// before any body is buffered), and both decode bodies with the functions
// below, which check every length against the bytes that are really there
// and against Limits before allocating. Nothing here throws on bad input: a
// decoder returns false with a reason, and the caller decides (the server
// closes that connection). This file is the libFuzzer target's whole world
// (tests/fuzz/), so it depends on the standard library alone.
//
// Thread-safety: free functions are pure; a FrameReader belongs to one
// connection.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace kizuna::store::wire {

using Bytes = std::vector<std::uint8_t>;

inline constexpr std::array<std::uint8_t, 4> kMagic = {'K', 'Z', 'S', 'T'};
inline constexpr std::uint8_t kVersion = 1;
inline constexpr std::size_t kHeaderBytes = 16;

inline constexpr std::uint32_t kMaxKeyBytes = 4096;
inline constexpr std::uint64_t kDefaultMaxValueBytes = 64ull << 20;
// Keys in one wait, check, multi_get or multi_set.
inline constexpr std::uint32_t kMaxBatchKeys = 16384;
// A frame body may exceed max_value_bytes by this much: room for the keys
// and length fields of a batch.
inline constexpr std::uint64_t kFrameOverheadBytes = 4ull << 20;
// Frames a peer may send before it has authenticated (an Auth is 65 bytes).
inline constexpr std::uint64_t kMaxHandshakeBodyBytes = 256;

inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kMacBytes = 32;  // HMAC-SHA256
using Nonce = std::array<std::uint8_t, kNonceBytes>;
using Mac = std::array<std::uint8_t, kMacBytes>;

enum class Op : std::uint8_t {
  // Handshake: the server speaks first.
  Hello = 1,   // server -> client: whether a token is required, the server nonce
  Auth = 2,    // client -> server: client nonce and proof
  AuthOk = 3,  // server -> client: the server's proof
  // Requests; a reply carries the request's opcode and id.
  Set = 16,
  Get = 17,
  Add = 18,
  CompareSet = 19,
  Wait = 20,
  Check = 21,
  Delete = 22,
  NumKeys = 23,
  MultiGet = 24,
  MultiSet = 25,
  Append = 26,
  Join = 27,
  ListKeys = 28,
  Ping = 29,
};

enum class Status : std::uint8_t {
  Ok = 0,
  Timeout = 1,          // a held request's deadline passed (body: detail, missing keys)
  InvalidArgument = 2,  // the request cannot be done (body: message)
  Mismatch = 3,         // the client disagrees with the server (join world size)
  AuthRequired = 4,     // the client has no token but the server needs one
  AuthFailed = 5,       // the client's proof is wrong
  TooLarge = 6,         // a frame over the server's limits (then the server closes)
  Internal = 7,         // the server failed (then it closes)
};

std::string_view name(Op op);
std::string_view name(Status status);
bool is_request(Op op);

// The header in host form. It is never sent raw: encode_header() writes each
// field at its offset, little-endian.
struct Header {
  std::uint8_t version = kVersion;
  Op op = Op::Ping;
  Status status = Status::Ok;
  std::uint8_t flags = 0;
  std::uint32_t id = 0;
  std::uint32_t body_bytes = 0;
};
static_assert(std::is_trivially_copyable_v<Header>);

void encode_header(const Header& header, std::uint8_t* out /* kHeaderBytes */);

struct Limits {
  std::uint64_t max_value_bytes = kDefaultMaxValueBytes;
  std::uint64_t max_body_bytes() const { return max_value_bytes + kFrameOverheadBytes; }
};

// What a request carries; which fields are used depends on the opcode
// (docs/store-protocol.md, "Requests").
struct Request {
  Op op = Op::Ping;
  std::uint32_t id = 0;
  std::vector<std::string> keys;  // Set..Append: one; Wait, Check, MultiGet, MultiSet: n
  std::vector<Bytes> values;      // Set, Append: one; CompareSet: expected, desired; MultiSet: n
  std::int64_t number = 0;        // Add: delta; Join: world size
  std::uint32_t timeout_ms = 0;   // Get, Wait, MultiGet, Join
  std::string prefix;             // ListKeys
};

struct Reply {
  Op op = Op::Ping;
  std::uint32_t id = 0;
  Status status = Status::Ok;
  std::vector<Bytes> values;      // Get, CompareSet: one; MultiGet: n
  std::vector<std::string> keys;  // ListKeys: the keys; Timeout: the missing keys
  std::int64_t number = 0;        // Add, NumKeys, Join: the value; Check, Delete, ListKeys: 0/1
  std::string message;            // every status but Ok: what went wrong
};

struct Hello {
  bool auth_required = false;
  Nonce server_nonce{};  // meaningful when auth_required
};

struct AuthRequest {
  bool has_token = false;
  Nonce client_nonce{};  // meaningful when has_token
  Mac proof{};
};

struct AuthOk {
  Mac proof{};
};

// Encoders append one whole frame (header and body) to `out`. They do not
// check Limits: the client checks its arguments before encoding.
void encode(const Request& request, Bytes& out);
void encode(const Reply& reply, Bytes& out);
void encode(const Hello& hello, Bytes& out);
void encode(const AuthRequest& auth, Bytes& out);
void encode(const AuthOk& ok, Bytes& out);

// Decoders take a header FrameReader accepted and its body; false (with a
// reason in `error`) when the body is not exactly what the opcode requires.
bool decode(const Header& header, std::span<const std::uint8_t> body, const Limits& limits,
            Request& out, std::string& error);
bool decode(const Header& header, std::span<const std::uint8_t> body, const Limits& limits,
            Reply& out, std::string& error);
bool decode(const Header& header, std::span<const std::uint8_t> body, Hello& out,
            std::string& error);
bool decode(const Header& header, std::span<const std::uint8_t> body, AuthRequest& out,
            std::string& error);
bool decode(const Header& header, std::span<const std::uint8_t> body, AuthOk& out,
            std::string& error);

// Assembles frames from a byte stream. Read into prepare(), commit() what
// arrived, then call next() until it says NeedMore. The buffer grows with the
// bytes that really arrived, never with a length a peer announced.
class FrameReader {
 public:
  enum class Result { Frame, NeedMore, Error };

  explicit FrameReader(std::uint64_t max_body_bytes) : max_body_bytes_(max_body_bytes) {}

  void set_max_body_bytes(std::uint64_t bytes) { max_body_bytes_ = bytes; }
  std::uint64_t max_body_bytes() const { return max_body_bytes_; }

  // Room for at least `bytes` more bytes at the end of the buffer.
  std::span<std::uint8_t> prepare(std::size_t bytes);
  void commit(std::size_t bytes);

  // On Frame, `header` and `body` describe the next frame; `body` stays valid
  // until the next prepare(). On Error, `error` says why (the stream cannot
  // be resynchronised: close it).
  Result next(Header& header, std::span<const std::uint8_t>& body, std::string& error);

  // Bytes received but not yet returned as frames (a partial frame).
  std::size_t buffered() const { return end_ - begin_; }
  // How many more bytes the frame being assembled needs; kHeaderBytes when
  // no header has been validated yet. A read size hint, bounded by the limit.
  std::size_t wanted() const;

 private:
  std::uint64_t max_body_bytes_;
  std::vector<std::uint8_t> buffer_;
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
};

// A key, value or message for a log line or an error: printable ASCII kept,
// anything else escaped as \xNN, cut at `max` characters.
std::string printable(std::string_view text, std::size_t max = 120);

}  // namespace kizuna::store::wire
