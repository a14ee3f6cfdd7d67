#include "store/wire.hpp"

#include <algorithm>
#include <cstring>

namespace kizuna::store::wire {
namespace {

// ---- little-endian field writers -------------------------------------------

void put_u8(Bytes& out, std::uint8_t v) { out.push_back(v); }

void put_u32(Bytes& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

void put_u64(Bytes& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

void put_i64(Bytes& out, std::int64_t v) { put_u64(out, static_cast<std::uint64_t>(v)); }

void put_blob(Bytes& out, const void* data, std::size_t size) {
  put_u32(out, static_cast<std::uint32_t>(size));
  const auto* p = static_cast<const std::uint8_t*>(data);
  out.insert(out.end(), p, p + size);
}

void put_string(Bytes& out, std::string_view s) { put_blob(out, s.data(), s.size()); }
void put_bytes(Bytes& out, const Bytes& b) { put_blob(out, b.data(), b.size()); }

template <std::size_t N>
void put_fixed(Bytes& out, const std::array<std::uint8_t, N>& a) {
  out.insert(out.end(), a.begin(), a.end());
}

// Reserves the header, lets `body` append, then fills the header in.
template <typename Body>
void frame(Bytes& out, Op op, Status status, std::uint32_t id, Body&& body) {
  const std::size_t start = out.size();
  out.resize(start + kHeaderBytes);
  body();
  Header header;
  header.op = op;
  header.status = status;
  header.id = id;
  header.body_bytes = static_cast<std::uint32_t>(out.size() - start - kHeaderBytes);
  encode_header(header, out.data() + start);
}

std::uint32_t load_u32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

// ---- bounds-checked field reader -------------------------------------------

// Reads fields from a body. The first failure records a reason and makes
// every later read fail too, so a decoder checks once at the end.
class Fields {
 public:
  Fields(std::span<const std::uint8_t> body, std::string& error) : body_(body), error_(error) {}

  bool ok() const { return ok_; }
  std::size_t remaining() const { return body_.size() - pos_; }

  bool fail(const std::string& why) {
    if (ok_) error_ = why;
    ok_ = false;
    return false;
  }

  std::uint8_t u8(const char* what) {
    if (!need(1, what)) return 0;
    return body_[pos_++];
  }

  std::uint32_t u32(const char* what) {
    if (!need(4, what)) return 0;
    const std::uint32_t v = load_u32(body_.data() + pos_);
    pos_ += 4;
    return v;
  }

  std::int64_t i64(const char* what) {
    if (!need(8, what)) return 0;
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(body_[pos_ + i]) << (8 * i);
    pos_ += 8;
    return static_cast<std::int64_t>(v);
  }

  // A length-prefixed field of at most `max` bytes; the length is checked
  // against `max` and against the bytes present before anything is copied.
  std::span<const std::uint8_t> blob(const char* what, std::uint64_t max) {
    const std::uint32_t size = u32(what);
    if (!ok_) return {};
    if (size > max) {
      fail(std::string(what) + " of " + std::to_string(size) + " bytes exceeds the limit of " +
           std::to_string(max) + " bytes");
      return {};
    }
    if (!need(size, what)) return {};
    const auto out = body_.subspan(pos_, size);
    pos_ += size;
    return out;
  }

  std::string key(const char* what = "key") {
    const auto b = blob(what, kMaxKeyBytes);
    if (ok_ && b.empty()) fail(std::string("empty ") + what);
    return std::string(b.begin(), b.end());
  }

  Bytes bytes(const char* what, std::uint64_t max) {
    const auto b = blob(what, max);
    return Bytes(b.begin(), b.end());
  }

  template <std::size_t N>
  void fixed(std::array<std::uint8_t, N>& out, const char* what) {
    if (!need(N, what)) return;
    std::memcpy(out.data(), body_.data() + pos_, N);
    pos_ += N;
  }

  // A batch count: at most kMaxBatchKeys, and no more than the remaining
  // bytes can hold at `min_item_bytes` each (so reserve() never trusts it).
  std::uint32_t count(const char* what, std::size_t min_item_bytes) {
    const std::uint32_t n = u32(what);
    if (!ok_) return 0;
    if (n > kMaxBatchKeys) {
      fail(std::string(what) + " " + std::to_string(n) + " exceeds the limit of " +
           std::to_string(kMaxBatchKeys));
      return 0;
    }
    if (static_cast<std::uint64_t>(n) * min_item_bytes > remaining()) {
      fail(std::string(what) + " " + std::to_string(n) + " does not fit in the " +
           std::to_string(remaining()) + " bytes left of the frame");
      return 0;
    }
    return n;
  }

  bool finish() {
    if (ok_ && pos_ != body_.size())
      fail(std::to_string(body_.size() - pos_) + " unexpected trailing bytes");
    return ok_;
  }

 private:
  bool need(std::size_t n, const char* what) {
    if (!ok_) return false;
    if (remaining() < n)
      return fail(std::string("truncated ") + what + ": needs " + std::to_string(n) +
                  " bytes, frame has " + std::to_string(remaining()) + " left");
    return true;
  }

  std::span<const std::uint8_t> body_;
  std::string& error_;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

bool is_known(Op op) {
  const auto v = static_cast<std::uint8_t>(op);
  return (v >= 1 && v <= 3) || (v >= 16 && v <= 29);
}

bool is_known(Status s) { return static_cast<std::uint8_t>(s) <= 7; }

}  // namespace

std::string_view name(Op op) {
  switch (op) {
    case Op::Hello: return "hello";
    case Op::Auth: return "auth";
    case Op::AuthOk: return "auth-ok";
    case Op::Set: return "set";
    case Op::Get: return "get";
    case Op::Add: return "add";
    case Op::CompareSet: return "compare_set";
    case Op::Wait: return "wait";
    case Op::Check: return "check";
    case Op::Delete: return "delete_key";
    case Op::NumKeys: return "num_keys";
    case Op::MultiGet: return "multi_get";
    case Op::MultiSet: return "multi_set";
    case Op::Append: return "append";
    case Op::Join: return "join";
    case Op::ListKeys: return "list_keys";
    case Op::Ping: return "ping";
  }
  return "unknown";
}

std::string_view name(Status status) {
  switch (status) {
    case Status::Ok: return "ok";
    case Status::Timeout: return "timeout";
    case Status::InvalidArgument: return "invalid argument";
    case Status::Mismatch: return "mismatch";
    case Status::AuthRequired: return "authentication required";
    case Status::AuthFailed: return "authentication failed";
    case Status::TooLarge: return "too large";
    case Status::Internal: return "internal error";
  }
  return "unknown";
}

bool is_request(Op op) {
  return static_cast<std::uint8_t>(op) >= 16 && static_cast<std::uint8_t>(op) <= 29;
}

void encode_header(const Header& header, std::uint8_t* out) {
  std::memcpy(out, kMagic.data(), 4);                 // 0..3   magic
  out[4] = header.version;                            // 4      version
  out[5] = static_cast<std::uint8_t>(header.op);      // 5      opcode
  out[6] = static_cast<std::uint8_t>(header.status);  // 6      status
  out[7] = header.flags;                              // 7      flags
  for (int i = 0; i < 4; ++i) out[8 + i] = static_cast<std::uint8_t>(header.id >> (8 * i));
  for (int i = 0; i < 4; ++i)  // 12..15 body length
    out[12 + i] = static_cast<std::uint8_t>(header.body_bytes >> (8 * i));
}

// ---- requests --------------------------------------------------------------

void encode(const Request& r, Bytes& out) {
  frame(out, r.op, Status::Ok, r.id, [&] {
    switch (r.op) {
      case Op::Set:
      case Op::Append:
        put_string(out, r.keys.at(0));
        put_bytes(out, r.values.at(0));
        break;
      case Op::Get:
        put_string(out, r.keys.at(0));
        put_u32(out, r.timeout_ms);
        break;
      case Op::Add:
        put_string(out, r.keys.at(0));
        put_i64(out, r.number);
        break;
      case Op::CompareSet:
        put_string(out, r.keys.at(0));
        put_bytes(out, r.values.at(0));
        put_bytes(out, r.values.at(1));
        break;
      case Op::Wait:
      case Op::MultiGet: put_u32(out, r.timeout_ms); [[fallthrough]];
      case Op::Check:
        put_u32(out, static_cast<std::uint32_t>(r.keys.size()));
        for (const auto& k : r.keys) put_string(out, k);
        break;
      case Op::Delete: put_string(out, r.keys.at(0)); break;
      case Op::MultiSet:
        put_u32(out, static_cast<std::uint32_t>(r.keys.size()));
        for (std::size_t i = 0; i < r.keys.size(); ++i) {
          put_string(out, r.keys[i]);
          put_bytes(out, r.values.at(i));
        }
        break;
      case Op::Join:
        put_u32(out, static_cast<std::uint32_t>(r.number));
        put_u32(out, r.timeout_ms);
        break;
      case Op::ListKeys: put_string(out, r.prefix); break;
      case Op::NumKeys:
      case Op::Ping:
      case Op::Hello:
      case Op::Auth:
      case Op::AuthOk: break;
    }
  });
}

bool decode(const Header& header, std::span<const std::uint8_t> body, const Limits& limits,
            Request& out, std::string& error) {
  if (!is_request(header.op)) {
    error = "opcode " + std::to_string(static_cast<int>(header.op)) + " is not a request";
    return false;
  }
  if (header.status != Status::Ok) {
    error = "request carries status " + std::to_string(static_cast<int>(header.status));
    return false;
  }
  out = Request{};
  out.op = header.op;
  out.id = header.id;
  Fields f(body, error);
  const std::uint64_t max_value = limits.max_value_bytes;
  switch (header.op) {
    case Op::Set:
    case Op::Append:
      out.keys.push_back(f.key());
      out.values.push_back(f.bytes("value", max_value));
      break;
    case Op::Get:
      out.keys.push_back(f.key());
      out.timeout_ms = f.u32("timeout");
      break;
    case Op::Add:
      out.keys.push_back(f.key());
      out.number = f.i64("delta");
      break;
    case Op::CompareSet:
      out.keys.push_back(f.key());
      out.values.push_back(f.bytes("expected value", max_value));
      out.values.push_back(f.bytes("desired value", max_value));
      break;
    case Op::Wait:
    case Op::MultiGet: out.timeout_ms = f.u32("timeout"); [[fallthrough]];
    case Op::Check: {
      const std::uint32_t n = f.count("key count", 4);
      out.keys.reserve(n);
      for (std::uint32_t i = 0; i < n && f.ok(); ++i) out.keys.push_back(f.key());
      break;
    }
    case Op::Delete: out.keys.push_back(f.key()); break;
    case Op::MultiSet: {
      const std::uint32_t n = f.count("key count", 8);
      out.keys.reserve(n);
      out.values.reserve(n);
      for (std::uint32_t i = 0; i < n && f.ok(); ++i) {
        out.keys.push_back(f.key());
        out.values.push_back(f.bytes("value", max_value));
      }
      break;
    }
    case Op::Join: {
      const std::uint32_t world = f.u32("world size");
      if (f.ok() && (world == 0 || world > (1u << 24)))
        f.fail("world size " + std::to_string(world) + " is out of range");
      out.number = world;
      out.timeout_ms = f.u32("timeout");
      break;
    }
    case Op::ListKeys: {
      const auto p = f.blob("prefix", kMaxKeyBytes);
      out.prefix.assign(p.begin(), p.end());
      break;
    }
    case Op::NumKeys:
    case Op::Ping:
    case Op::Hello:
    case Op::Auth:
    case Op::AuthOk: break;
  }
  return f.finish();
}

// ---- replies ---------------------------------------------------------------

void encode(const Reply& r, Bytes& out) {
  frame(out, r.op, r.status, r.id, [&] {
    if (r.status == Status::Timeout) {
      put_string(out, r.message);
      put_u32(out, static_cast<std::uint32_t>(r.keys.size()));
      for (const auto& k : r.keys) put_string(out, k);
      return;
    }
    if (r.status != Status::Ok) {
      put_string(out, r.message);
      return;
    }
    switch (r.op) {
      case Op::Get:
      case Op::CompareSet: put_bytes(out, r.values.at(0)); break;
      case Op::Add:
      case Op::NumKeys:
      case Op::Join: put_i64(out, r.number); break;
      case Op::Check:
      case Op::Delete: put_u8(out, r.number != 0 ? 1 : 0); break;
      case Op::MultiGet:
        put_u32(out, static_cast<std::uint32_t>(r.values.size()));
        for (const auto& v : r.values) put_bytes(out, v);
        break;
      case Op::ListKeys:
        put_u8(out, r.number != 0 ? 1 : 0);
        put_u32(out, static_cast<std::uint32_t>(r.keys.size()));
        for (const auto& k : r.keys) put_string(out, k);
        break;
      default: break;
    }
  });
}

bool decode(const Header& header, std::span<const std::uint8_t> body, const Limits& limits,
            Reply& out, std::string& error) {
  // A refused handshake is answered with an error reply under the auth opcode.
  const bool auth_refusal = header.op == Op::Auth && header.status != Status::Ok;
  if (!is_request(header.op) && !auth_refusal) {
    error = "opcode " + std::to_string(static_cast<int>(header.op)) + " is not a reply";
    return false;
  }
  if (!is_known(header.status)) {
    error = "unknown status " + std::to_string(static_cast<int>(header.status));
    return false;
  }
  out = Reply{};
  out.op = header.op;
  out.id = header.id;
  out.status = header.status;
  Fields f(body, error);
  const std::uint64_t max_value = limits.max_value_bytes;
  if (header.status == Status::Timeout) {
    const auto m = f.blob("message", kMaxKeyBytes);
    out.message.assign(m.begin(), m.end());
    const std::uint32_t n = f.count("missing key count", 4);
    out.keys.reserve(n);
    for (std::uint32_t i = 0; i < n && f.ok(); ++i) out.keys.push_back(f.key("missing key"));
    return f.finish();
  }
  if (header.status != Status::Ok) {
    const auto m = f.blob("message", kMaxKeyBytes);
    out.message.assign(m.begin(), m.end());
    return f.finish();
  }
  switch (header.op) {
    case Op::Get:
    case Op::CompareSet: out.values.push_back(f.bytes("value", max_value)); break;
    case Op::Add:
    case Op::NumKeys:
    case Op::Join: out.number = f.i64("number"); break;
    case Op::Check:
    case Op::Delete:
      out.number = f.u8("flag");
      if (f.ok() && out.number > 1) f.fail("flag is not 0 or 1");
      break;
    case Op::MultiGet: {
      const std::uint32_t n = f.count("value count", 4);
      out.values.reserve(n);
      for (std::uint32_t i = 0; i < n && f.ok(); ++i)
        out.values.push_back(f.bytes("value", max_value));
      break;
    }
    case Op::ListKeys: {
      out.number = f.u8("truncated flag");
      if (f.ok() && out.number > 1) f.fail("truncated flag is not 0 or 1");
      const std::uint32_t n = f.count("key count", 4);
      out.keys.reserve(n);
      for (std::uint32_t i = 0; i < n && f.ok(); ++i) out.keys.push_back(f.key());
      break;
    }
    default: break;
  }
  return f.finish();
}

// ---- handshake -------------------------------------------------------------

void encode(const Hello& hello, Bytes& out) {
  frame(out, Op::Hello, Status::Ok, 0, [&] {
    put_u8(out, hello.auth_required ? 1 : 0);
    if (hello.auth_required) put_fixed(out, hello.server_nonce);
  });
}

bool decode(const Header& header, std::span<const std::uint8_t> body, Hello& out,
            std::string& error) {
  if (header.op != Op::Hello) {
    error = "expected a hello frame, got opcode " + std::to_string(static_cast<int>(header.op));
    return false;
  }
  Fields f(body, error);
  const std::uint8_t auth = f.u8("auth flag");
  if (f.ok() && auth > 1) f.fail("auth flag is not 0 or 1");
  out.auth_required = auth == 1;
  if (out.auth_required) f.fixed(out.server_nonce, "server nonce");
  return f.finish();
}

void encode(const AuthRequest& auth, Bytes& out) {
  frame(out, Op::Auth, Status::Ok, 0, [&] {
    put_u8(out, auth.has_token ? 1 : 0);
    if (auth.has_token) {
      put_fixed(out, auth.client_nonce);
      put_fixed(out, auth.proof);
    }
  });
}

bool decode(const Header& header, std::span<const std::uint8_t> body, AuthRequest& out,
            std::string& error) {
  if (header.op != Op::Auth) {
    error = "expected an auth frame, got opcode " + std::to_string(static_cast<int>(header.op));
    return false;
  }
  if (header.status != Status::Ok) {
    error = "auth frame carries a status";
    return false;
  }
  Fields f(body, error);
  const std::uint8_t has = f.u8("token flag");
  if (f.ok() && has > 1) f.fail("token flag is not 0 or 1");
  out.has_token = has == 1;
  if (out.has_token) {
    f.fixed(out.client_nonce, "client nonce");
    f.fixed(out.proof, "client proof");
  }
  return f.finish();
}

void encode(const AuthOk& ok, Bytes& out) {
  frame(out, Op::AuthOk, Status::Ok, 0, [&] { put_fixed(out, ok.proof); });
}

bool decode(const Header& header, std::span<const std::uint8_t> body, AuthOk& out,
            std::string& error) {
  if (header.op != Op::AuthOk) {
    error = "expected an auth-ok frame, got opcode " + std::to_string(static_cast<int>(header.op));
    return false;
  }
  Fields f(body, error);
  f.fixed(out.proof, "server proof");
  return f.finish();
}

// ---- FrameReader -----------------------------------------------------------

std::span<std::uint8_t> FrameReader::prepare(std::size_t bytes) {
  if (begin_ == end_) begin_ = end_ = 0;
  if (buffer_.size() - end_ < bytes && begin_ > 0) {
    std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (buffer_.size() - end_ < bytes) buffer_.resize(std::max(end_ + bytes, buffer_.size() * 2));
  return std::span<std::uint8_t>(buffer_.data() + end_, buffer_.size() - end_);
}

void FrameReader::commit(std::size_t bytes) { end_ = std::min(end_ + bytes, buffer_.size()); }

std::size_t FrameReader::wanted() const {
  const std::size_t have = buffered();
  if (have < kHeaderBytes) return kHeaderBytes - have;
  const std::uint64_t body = load_u32(buffer_.data() + begin_ + 12);
  if (body > max_body_bytes_) return kHeaderBytes;
  const std::uint64_t total = kHeaderBytes + body;
  return total > have ? static_cast<std::size_t>(total - have) : 0;
}

FrameReader::Result FrameReader::next(Header& header, std::span<const std::uint8_t>& body,
                                      std::string& error) {
  const std::size_t have = buffered();
  if (have == 0) return Result::NeedMore;
  const std::uint8_t* p = buffer_.data() + begin_;
  // Validate what has arrived of the header right away, so that a stranger
  // is turned away after its first bytes rather than after sixteen.
  const std::size_t magic_bytes = std::min<std::size_t>(have, 4);
  if (std::memcmp(p, kMagic.data(), magic_bytes) != 0) {
    error = "bad magic " +
            printable(std::string_view(reinterpret_cast<const char*>(p), magic_bytes), 16) +
            " (expected \"KZST\": not a kizuna store peer?)";
    return Result::Error;
  }
  if (have >= 5 && p[4] != kVersion) {
    error = "unsupported protocol version " + std::to_string(p[4]) + " (this side speaks " +
            std::to_string(kVersion) + ")";
    return Result::Error;
  }
  if (have < kHeaderBytes) return Result::NeedMore;
  header.version = p[4];
  header.op = static_cast<Op>(p[5]);
  header.status = static_cast<Status>(p[6]);
  header.flags = p[7];
  header.id = load_u32(p + 8);
  header.body_bytes = load_u32(p + 12);
  if (!is_known(header.op)) {
    error = "unknown opcode " + std::to_string(p[5]);
    return Result::Error;
  }
  if (header.flags != 0) {
    error = "reserved flags byte is " + std::to_string(header.flags) + ", not 0";
    return Result::Error;
  }
  if (header.body_bytes > max_body_bytes_) {
    error = "frame body of " + std::to_string(header.body_bytes) + " bytes exceeds the limit of " +
            std::to_string(max_body_bytes_) + " bytes";
    return Result::Error;
  }
  if (have < kHeaderBytes + header.body_bytes) return Result::NeedMore;
  body = std::span<const std::uint8_t>(p + kHeaderBytes, header.body_bytes);
  begin_ += kHeaderBytes + header.body_bytes;
  return Result::Frame;
}

std::string printable(std::string_view text, std::size_t max) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const char c : text) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && u != '\\') {
      out += c;
    } else {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

}  // namespace kizuna::store::wire
