// Checkpoint (kizuna/checkpoint.hpp): the entries, the file format and its
// atomic write and read. The collective save and load are in
// checkpoint_collective.cpp, so that this file needs no communicator (the
// fuzzer, tests/fuzz/fuzz_checkpoint.cpp, builds it alone).
#include <kizuna/checkpoint.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <functional>

#include "core/check.hpp"
#include "ddp/checkpoint_io.hpp"
#include "ddp/crc32c.hpp"

namespace kizuna {

namespace {

constexpr std::array<std::uint8_t, 8> kMagic = {'K', 'Z', 'C', 'K', 'P', 'T', '\r', '\n'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kHeaderBytes = 8 + 4 + 4 + 8;
constexpr std::size_t kTrailerBytes = ddp::kCheckpointTrailerBytes;
constexpr std::size_t kMaxNameBytes = 4096;
constexpr std::uint64_t kMaxFileBytes = std::uint64_t{1} << 40;
// name length + dtype + count: the least an entry takes.
constexpr std::size_t kMinEntryBytes = 4 + 1 + 8;

void put_le(std::uint8_t* out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

std::uint64_t get_le(const std::uint8_t* in, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(in[i]) << (8 * i);
  return v;
}

[[noreturn]] void throw_errno(const std::string& what, const std::string& path) {
  const int e = errno;
  KIZUNA_THROW(ErrorCode::SystemError, "checkpoint: ", what, " ", path, ": ", std::strerror(e));
}

std::string directory_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Owns a file descriptor.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

void Checkpoint::put(const std::string& name, const void* data, std::size_t count, DataType dtype) {
  KIZUNA_CHECK_ARG(!name.empty() && name.size() <= kMaxNameBytes, "Checkpoint::put: name '", name,
                   "' must have 1 to ", kMaxNameBytes, " bytes");
  KIZUNA_CHECK_ARG(is_valid(dtype), "Checkpoint::put: invalid dtype for '", name, "'");
  KIZUNA_CHECK_ARG(data != nullptr || count == 0, "Checkpoint::put: '", name, "' is null with count ",
                   count);
  Entry e;
  e.name = name;
  e.dtype = dtype;
  e.count = count;
  const auto* p = static_cast<const std::uint8_t*>(data);
  e.data.assign(p, p + count * size_of(dtype));
  if (auto it = index_.find(name); it != index_.end()) {
    entries_[it->second] = std::move(e);
    return;
  }
  index_.emplace(name, entries_.size());
  entries_.push_back(std::move(e));
}

bool Checkpoint::contains(const std::string& name) const { return index_.count(name) != 0; }

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& e : entries_) out.push_back(e.name);
  return out;
}

const Checkpoint::Entry& Checkpoint::find(const std::string& name) const {
  if (auto it = index_.find(name); it != index_.end()) return entries_[it->second];
  KIZUNA_THROW(ErrorCode::InvalidArgument, "checkpoint has no entry '", name, "' (",
               entries_.size(), " entries)");
}

DataType Checkpoint::dtype(const std::string& name) const { return find(name).dtype; }
std::size_t Checkpoint::count(const std::string& name) const { return find(name).count; }

void Checkpoint::get(const std::string& name, void* dst, std::size_t count, DataType dtype) const {
  const Entry& e = find(name);
  KIZUNA_CHECK_ARG(e.dtype == dtype && e.count == count, "checkpoint entry '", name, "' holds ",
                   e.count, " ", kizuna::name(e.dtype), ", not ", count, " ", kizuna::name(dtype));
  if (!e.data.empty()) std::memcpy(dst, e.data.data(), e.data.size());
}

namespace {

using Sink = std::function<void(const void*, std::size_t)>;

// The format of kizuna/checkpoint.hpp, streamed to `sink`, CRC last.
template <typename Entries>
void emit_file(const Entries& entries, const Sink& sink) {
  std::uint64_t payload = 0;
  for (const auto& e : entries) payload += kMinEntryBytes + e.name.size() + e.data.size();
  // What deserialize() refuses is refused here, before a byte is written.
  KIZUNA_CHECK_ARG(entries.size() <= UINT32_MAX, "checkpoint: ", entries.size(), " entries, more than a file holds (",
                   UINT32_MAX, ")");
  KIZUNA_CHECK_ARG(payload <= kMaxFileBytes, "checkpoint: ", payload, " bytes of entries, more than a file holds (",
                   kMaxFileBytes, ")");
  ddp::Crc32c crc;
  auto out = [&](const void* p, std::size_t n) {
    crc.update(p, n);
    sink(p, n);
  };
  std::uint8_t header[kHeaderBytes];
  std::memcpy(header, kMagic.data(), kMagic.size());
  put_le(header + 8, kVersion, 4);
  put_le(header + 12, entries.size(), 4);
  put_le(header + 16, payload, 8);
  out(header, sizeof header);
  for (const auto& e : entries) {
    std::uint8_t len[4];
    put_le(len, e.name.size(), 4);
    out(len, 4);
    out(e.name.data(), e.name.size());
    std::uint8_t meta[9];
    meta[0] = static_cast<std::uint8_t>(e.dtype);
    put_le(meta + 1, e.count, 8);
    out(meta, 9);
    if (!e.data.empty()) out(e.data.data(), e.data.size());
  }
  std::uint8_t trailer[kTrailerBytes];
  put_le(trailer, crc.value(), 4);
  sink(trailer, sizeof trailer);
}

}  // namespace

std::vector<std::uint8_t> Checkpoint::serialize() const {
  std::vector<std::uint8_t> bytes;
  emit_file(entries_, [&](const void* p, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
  });
  return bytes;
}

Checkpoint Checkpoint::deserialize(const std::vector<std::uint8_t>& bytes, const std::string& source) {
  const std::size_t size = bytes.size();
  const std::uint8_t* p = bytes.data();
  auto corrupt = [&](const auto&... parts) {
    KIZUNA_THROW(ErrorCode::InvalidArgument, "checkpoint ", source, ": ", parts...);
  };
  if (size < kHeaderBytes + kTrailerBytes)
    corrupt("truncated: ", size, " bytes, a checkpoint has at least ", kHeaderBytes + kTrailerBytes);
  if (!std::equal(kMagic.begin(), kMagic.end(), p))
    corrupt("not a kizuna checkpoint (bad magic)");
  const auto version = static_cast<std::uint32_t>(get_le(p + 8, 4));
  if (version != kVersion)
    corrupt("format version ", version, ", this build reads version ", kVersion);
  const auto entry_count = static_cast<std::uint32_t>(get_le(p + 12, 4));
  const std::uint64_t payload = get_le(p + 16, 8);
  if (payload > kMaxFileBytes || kHeaderBytes + payload + kTrailerBytes != size)
    corrupt(size < kHeaderBytes + payload + kTrailerBytes ? "truncated" : "wrong size", ": the header says ",
            payload, " payload bytes, so ", kHeaderBytes + payload + kTrailerBytes,
            " bytes in all, but there are ", size);
  const auto stored = static_cast<std::uint32_t>(get_le(p + size - kTrailerBytes, 4));
  ddp::Crc32c crc;
  crc.update(p, size - kTrailerBytes);
  if (crc.value() != stored)
    corrupt("checksum mismatch (stored CRC-32C ", stored, ", computed ", crc.value(),
            "): the file is corrupt");
  if (entry_count > payload / kMinEntryBytes)
    corrupt(entry_count, " entries cannot fit in ", payload, " payload bytes");

  Checkpoint out;
  out.entries_.reserve(entry_count);
  std::size_t at = kHeaderBytes;
  const std::size_t end = size - kTrailerBytes;
  for (std::uint32_t i = 0; i < entry_count; ++i) {
    auto need = [&](std::uint64_t n, const char* what) {
      if (n > end - at) corrupt("entry #", i, "'s ", what, " overruns the payload");
    };
    need(4, "name length");
    const std::uint64_t name_len = get_le(p + at, 4);
    at += 4;
    if (name_len == 0 || name_len > kMaxNameBytes)
      corrupt("entry #", i, " has a name of ", name_len, " bytes (1 to ", kMaxNameBytes, " allowed)");
    need(name_len, "name");
    Entry e;
    e.name.assign(reinterpret_cast<const char*>(p + at), name_len);
    at += name_len;
    need(9, "type and count");
    const auto dtype = static_cast<DataType>(p[at]);
    if (!is_valid(dtype)) corrupt("entry '", e.name, "' has an invalid dtype code ", int(p[at]));
    const std::uint64_t count = get_le(p + at + 1, 8);
    at += 9;
    if (count > (end - at) / size_of(dtype)) corrupt("entry '", e.name, "''s data overruns the payload");
    e.dtype = dtype;
    e.count = count;
    e.data.assign(p + at, p + at + count * size_of(dtype));
    at += e.data.size();
    if (!out.index_.emplace(e.name, out.entries_.size()).second) corrupt("entry '", e.name, "' appears twice");
    out.entries_.push_back(std::move(e));
  }
  if (at != end) corrupt(end - at, " bytes after the last entry");
  return out;
}

void Checkpoint::write_file(const std::string& path) const {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  Fd file;
  file.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (file.fd < 0) throw_errno("cannot create", tmp);
  try {
    // Small pieces are gathered into 1 MiB writes; entry data goes straight out.
    std::vector<std::uint8_t> buffer;
    buffer.reserve(1 << 20);
    auto flush = [&](const void* data, std::size_t n) {
      const auto* b = static_cast<const std::uint8_t*>(data);
      while (n > 0) {
        const ssize_t w = ::write(file.fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) throw_errno("cannot write", tmp);
        b += w;
        n -= static_cast<std::size_t>(w);
      }
    };
    emit_file(entries_, [&](const void* data, std::size_t n) {
      if (buffer.size() + n > buffer.capacity()) {
        flush(buffer.data(), buffer.size());
        buffer.clear();
      }
      if (n >= buffer.capacity()) {
        flush(data, n);
        return;
      }
      const auto* b = static_cast<const std::uint8_t*>(data);
      buffer.insert(buffer.end(), b, b + n);
    });
    flush(buffer.data(), buffer.size());
    if (::fsync(file.fd) != 0) throw_errno("cannot fsync", tmp);
    const int fd = file.fd;
    file.fd = -1;
    if (::close(fd) != 0) throw_errno("cannot close", tmp);
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw_errno("cannot rename " + tmp + " to", path);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  // The rename is durable once the directory is.
  const std::string dir = directory_of(path);
  Fd d;
  d.fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d.fd < 0) throw_errno("cannot open directory", dir);
  if (::fsync(d.fd) != 0) throw_errno("cannot fsync directory", dir);
}

std::vector<std::uint8_t> ddp::read_checkpoint_bytes(const std::string& path) {
  Fd file;
  file.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file.fd < 0) throw_errno("cannot open", path);
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) throw_errno("cannot stat", path);
  KIZUNA_CHECK_ARG(static_cast<std::uint64_t>(st.st_size) <= kMaxFileBytes, "checkpoint ", path,
                   ": ", st.st_size, " bytes is beyond the ", kMaxFileBytes, "-byte limit");
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(st.st_size));
  std::size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t r = ::read(file.fd, bytes.data() + at, bytes.size() - at);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw_errno("cannot read", path);
    if (r == 0) break;  // shrank while we read: deserialize reports the truncation
    at += static_cast<std::size_t>(r);
  }
  bytes.resize(at);
  return bytes;
}

Checkpoint Checkpoint::read_file(const std::string& path) {
  return deserialize(ddp::read_checkpoint_bytes(path), path);
}

}  // namespace kizuna
