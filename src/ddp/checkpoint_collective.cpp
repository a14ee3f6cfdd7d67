// Checkpoint (kizuna/checkpoint.hpp): the collective save and load, over
// the local write_file() and read of checkpoint.cpp.
#include <kizuna/checkpoint.hpp>

#include <array>
#include <cstring>
#include <map>

#include "core/check.hpp"
#include "ddp/checkpoint_io.hpp"
#include "ddp/registration.hpp"

namespace kizuna {

namespace {

void put_le(std::uint8_t* out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

std::uint64_t get_le(const std::uint8_t* in, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(in[i]) << (8 * i);
  return v;
}

// What a rank tells the others about its part of a collective save or load:
// a fixed 512-byte record, integers little-endian.
//   [0, 4)    0 for success, else 1 + the ErrorCode
//   [4, 8)    the file's CRC-32C (load)
//   [8, 16)   the file's size (load)
//   [16, 512) the error message, NUL-terminated, truncated
constexpr std::size_t kOutcomeBytes = 512;

std::array<std::uint8_t, kOutcomeBytes> encode_outcome(std::uint32_t code, std::uint32_t crc,
                                                      std::uint64_t size, const std::string& message) {
  std::array<std::uint8_t, kOutcomeBytes> out{};
  put_le(out.data(), code, 4);
  put_le(out.data() + 4, crc, 4);
  put_le(out.data() + 8, size, 8);
  std::memcpy(out.data() + 16, message.data(), std::min(message.size(), kOutcomeBytes - 17));
  return out;
}

struct Outcome {
  std::uint32_t code = 0;
  std::uint32_t crc = 0;
  std::uint64_t size = 0;
  std::string message;
};

Outcome decode_outcome(const std::uint8_t* p) {
  Outcome o;
  o.code = static_cast<std::uint32_t>(get_le(p, 4));
  o.crc = static_cast<std::uint32_t>(get_le(p + 4, 4));
  o.size = get_le(p + 8, 8);
  o.message.assign(reinterpret_cast<const char*>(p + 16),
                   strnlen(reinterpret_cast<const char*>(p + 16), kOutcomeBytes - 16));
  return o;
}

std::uint32_t code_of(const std::exception_ptr& e, std::string& message) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    message = err.what();
    return 1 + static_cast<std::uint32_t>(err.code());
  } catch (const std::exception& err) {
    message = err.what();
    return 1 + static_cast<std::uint32_t>(ErrorCode::Internal);
  }
}

}  // namespace

void Checkpoint::save(Communicator& comm, const std::string& path, int root) const {
  KIZUNA_CHECK_ARG(root >= 0 && root < comm.size(), "Checkpoint::save: root ", root,
                   " is not a rank of ", comm.size());
  std::exception_ptr error;
  std::array<std::uint8_t, kOutcomeBytes> outcome{};
  if (comm.rank() == root) {
    try {
      write_file(path);
    } catch (...) {
      error = std::current_exception();
    }
    std::string message;
    const std::uint32_t code = error ? code_of(error, message) : 0;
    outcome = encode_outcome(code, 0, 0, message);
  }
  // The broadcast is the barrier: nobody returns before root has written.
  comm.broadcast(outcome.data(), outcome.size(), DataType::UInt8, root).wait();
  if (error) std::rethrow_exception(error);
  const Outcome o = decode_outcome(outcome.data());
  if (o.code != 0)
    KIZUNA_THROW(static_cast<ErrorCode>(o.code - 1), "Checkpoint::save on rank ", comm.rank(),
                 ": rank ", root, " failed to write ", path, ": ", o.message);
}

Checkpoint Checkpoint::load(Communicator& comm, const std::string& path) {
  std::exception_ptr error;
  Checkpoint result;
  std::uint32_t crc = 0;
  std::uint64_t size = 0;
  try {
    const auto bytes = ddp::read_checkpoint_bytes(path);
    result = deserialize(bytes, path);  // checks that the trailer is the file's CRC
    size = bytes.size();
    crc = static_cast<std::uint32_t>(get_le(bytes.data() + bytes.size() - ddp::kCheckpointTrailerBytes, 4));
  } catch (...) {
    error = std::current_exception();
  }
  std::string message;
  const std::uint32_t code = error ? code_of(error, message) : 0;
  const auto mine = encode_outcome(code, crc, size, message);
  std::vector<std::uint8_t> all(kOutcomeBytes * comm.size());
  comm.all_gather(mine.data(), all.data(), kOutcomeBytes, DataType::UInt8).wait();
  if (error) std::rethrow_exception(error);

  std::vector<Outcome> outcomes;
  for (int r = 0; r < comm.size(); ++r) outcomes.push_back(decode_outcome(all.data() + r * kOutcomeBytes));
  for (int r = 0; r < comm.size(); ++r)
    if (outcomes[r].code != 0)
      KIZUNA_THROW(static_cast<ErrorCode>(outcomes[r].code - 1), "Checkpoint::load on rank ",
                   comm.rank(), ": rank ", r, " could not load ", path, ": ", outcomes[r].message);
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::vector<int>> versions;
  for (int r = 0; r < comm.size(); ++r) versions[{outcomes[r].crc, outcomes[r].size}].push_back(r);
  if (versions.size() > 1) {
    std::string groups;
    for (const auto& [key, ranks] : versions)
      groups += (groups.empty() ? "" : "; ") + std::to_string(key.second) + " bytes with CRC-32C " +
                std::to_string(key.first) + " on " + ddp::describe_ranks(ranks);
    KIZUNA_THROW(ErrorCode::Mismatch, "Checkpoint::load on rank ", comm.rank(),
                 ": ranks read different files at ", path, ": ", groups);
  }
  return result;
}

}  // namespace kizuna
