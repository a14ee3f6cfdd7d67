#include "transport/shm/region.hpp"

#include <new>

#include "core/check.hpp"

namespace kizuna::transport::shm {

namespace {

// The file's size: the data's and the header's.
std::uint64_t with_header(const std::string& name, std::uint64_t bytes) {
  std::uint64_t total = 0;
  KIZUNA_CHECK_ARG(!__builtin_add_overflow(bytes, kRegionHeaderBytes, &total) && total <= (1ull << 62),
                   "shared memory ", name, ": ", bytes, " bytes is more than can be mapped");
  return total;
}

}  // namespace

Region Region::create(const std::string& name, std::uint64_t bytes, std::uint64_t comm_id, int owner,
                      std::uint64_t number) {
  Region r(SharedFile::create(name, with_header(name, bytes)));
  auto* h = new (r.file_.data()) RegionHeader{};
  h->version = kRegionVersion;
  h->owner_rank = static_cast<std::uint32_t>(owner);
  h->comm_id = comm_id;
  h->number = number;
  h->bytes = bytes;
  h->arrived.store(0);
  h->doorbell.store(0);
  h->sleeping.store(0);
  // Peers map the region only after its name reaches them through the
  // store, which orders these writes before their reads.
  h->magic = kRegionMagic;
  return r;
}

Region Region::map(const std::string& name, std::uint64_t bytes, std::uint64_t comm_id, int owner,
                   std::uint64_t number) {
  // Populated: every page is in this process's tables before the first
  // collective reads it.
  Region r(SharedFile::open(name, owner, with_header(name, bytes), true));
  const RegionHeader* h = r.header();
  if (h->magic != kRegionMagic || h->version != kRegionVersion || h->comm_id != comm_id ||
      h->owner_rank != static_cast<std::uint32_t>(owner) || h->number != number || h->bytes != bytes)
    KIZUNA_THROW(ErrorCode::Mismatch, "shared memory ", name, " is not rank ", owner, "'s allocation #", number,
                 " of ", bytes, " bytes in this communicator (stale or foreign)");
  return r;
}

}  // namespace kizuna::transport::shm
