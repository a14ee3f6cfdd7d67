// transport/shm/region.hpp: a block of shared memory that one rank owns and
// the other ranks of its node map: the storage of a symmetric allocation
// (comm/symmetric.hpp), where peers read one another's buffers directly.
//
//   [RegionHeader, 4 KiB][data: `bytes`, page-aligned]
//
// The header's control lines carry what peers need to meet in a collective
// on such memory: a phase counter the owner advances (`arrived`), the call
// the owner is in (`call`), a doorbell the owner sleeps on, and the line
// the owner bounces with a peer to probe how far apart their CPUs are
// (`ball`, comm/placement_probe.hpp), with the CPU it ran on then (`cpu`).
// Each field another process writes or polls is on its own cache line.
//
// create() reserves and touches every page (shared_file.hpp). map() opens a peer's region and
// checks its header against what the caller expects: magic, version,
// communicator, owner, allocation number and size. unlink() drops the name
// once every peer has mapped it; the memory lives while any process maps it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "transport/shm/shared_file.hpp"

namespace kizuna::transport::shm {

inline constexpr std::uint64_t kRegionMagic = 0x4d59535a4b5a4b31ull;  // "1KZKZSYM"
inline constexpr std::uint32_t kRegionVersion = 3;
inline constexpr std::size_t kRegionHeaderBytes = 4096;

// The call a rank is in, as its peers check it (all plain fields, written
// by the owner before it advances `arrived`, read by peers after they see
// the advance).
struct RegionCall {
  std::uint64_t seq;
  std::uint64_t count;
  std::uint32_t dtype;
  std::uint32_t op;
  std::uint64_t input_region;   // allocation number of the input
  std::uint64_t output_region;  // and of the output
  std::uint64_t input_offset;   // within those allocations' data
  std::uint64_t output_offset;
};

struct alignas(64) RegionHeader {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t owner_rank;
  std::uint64_t comm_id;
  std::uint64_t number;  // the allocation's number within its communicator
  std::uint64_t bytes;   // of data
  alignas(64) std::atomic<std::uint64_t> arrived;
  alignas(64) RegionCall call;
  alignas(64) std::atomic<std::uint32_t> doorbell;
  std::atomic<std::uint32_t> sleeping;
  alignas(64) std::atomic<std::uint64_t> ball;
  alignas(64) std::atomic<std::int32_t> cpu;  // written before a meeting, read after it
  std::atomic<std::int32_t> told[2];          // rank 0's placement verdicts, the same way (comm/symmetric.hpp)
};

static_assert(sizeof(RegionHeader) <= kRegionHeaderBytes);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::int32_t>::is_always_lock_free);

class Region {
 public:
  Region() = default;

  static Region create(const std::string& name, std::uint64_t bytes, std::uint64_t comm_id, int owner,
                       std::uint64_t number);
  static Region map(const std::string& name, std::uint64_t bytes, std::uint64_t comm_id, int owner,
                    std::uint64_t number);
  void unlink() { file_.unlink(); }

  RegionHeader* header() const { return reinterpret_cast<RegionHeader*>(file_.data()); }
  unsigned char* data() const { return file_.data() + kRegionHeaderBytes; }
  std::uint64_t bytes() const { return file_.bytes() - kRegionHeaderBytes; }
  const std::string& name() const { return file_.name(); }

 private:
  explicit Region(SharedFile file) : file_(std::move(file)) {}

  SharedFile file_;
};

}  // namespace kizuna::transport::shm
