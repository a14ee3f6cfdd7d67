#include "transport/shm/region.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "core/check.hpp"
#include "transport/shm/segment.hpp"

namespace kizuna::transport::shm {

Region::~Region() { release(); }

void Region::release() noexcept {
  if (base_) ::munmap(base_, mapped_);
  if (linked_) ::shm_unlink(name_.c_str());
  base_ = nullptr;
  linked_ = false;
}

Region::Region(Region&& o) noexcept { *this = std::move(o); }

Region& Region::operator=(Region&& o) noexcept {
  if (this != &o) {
    release();
    base_ = o.base_;
    mapped_ = o.mapped_;
    name_ = std::move(o.name_);
    linked_ = o.linked_;
    o.base_ = nullptr;
    o.linked_ = false;
  }
  return *this;
}

Region Region::create(const std::string& name, std::uint64_t bytes, std::uint64_t comm_id, int owner,
                      std::uint64_t number) {
  std::uint64_t total = 0;
  KIZUNA_CHECK_ARG(!__builtin_add_overflow(bytes, kRegionHeaderBytes, &total) && total <= (1ull << 62),
                   "shared memory ", name, ": ", bytes, " bytes is more than can be mapped");
  Region r;
  r.name_ = name;
  r.mapped_ = total;
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0)
    KIZUNA_THROW(ErrorCode::SystemError, "cannot create shared memory ", name, ": ", std::strerror(errno));
  r.linked_ = true;
  const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(total));
  if (rc != 0) {
    ::close(fd);
    KIZUNA_THROW(ErrorCode::SystemError, "cannot reserve ", total >> 10, " KiB of shared memory for ", name,
                 ": ", std::strerror(rc), " (is /dev/shm too small? free: ", shm_free_bytes() >> 20, " MiB)");
  }
  void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED)
    KIZUNA_THROW(ErrorCode::SystemError, "cannot map shared memory ", name, ": ", std::strerror(errno));
  r.base_ = static_cast<unsigned char*>(p);
  // Touch every page now: a first access costs a fault of 20-40 us on
  // this project's virtual machines even when the pages exist
  // (transport/shm/segment.cpp), which must not land inside a collective.
  std::memset(p, 0, total);
  auto* h = new (r.base_) RegionHeader{};
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
  Region r;
  r.name_ = name;
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0)
    KIZUNA_THROW(ErrorCode::SystemError, "cannot open rank ", owner, "'s shared memory ", name, ": ",
                 std::strerror(errno));
  struct stat st {};
  const std::uint64_t total = bytes + kRegionHeaderBytes;
  if (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) != total) {
    ::close(fd);
    KIZUNA_THROW(ErrorCode::Mismatch, "rank ", owner, "'s shared memory ", name, " holds ",
                 static_cast<long long>(st.st_size), " bytes where ", total, " were expected (stale or foreign)");
  }
  // Populated: every page is in this process's tables before the first
  // collective reads it.
  void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED)
    KIZUNA_THROW(ErrorCode::SystemError, "cannot map rank ", owner, "'s shared memory ", name, ": ",
                 std::strerror(errno));
  r.base_ = static_cast<unsigned char*>(p);
  r.mapped_ = total;
  const RegionHeader* h = r.header();
  if (h->magic != kRegionMagic || h->version != kRegionVersion || h->comm_id != comm_id ||
      h->owner_rank != static_cast<std::uint32_t>(owner) || h->number != number || h->bytes != bytes)
    KIZUNA_THROW(ErrorCode::Mismatch, "shared memory ", name, " is not rank ", owner, "'s allocation #", number,
                 " of ", bytes, " bytes in this communicator (stale or foreign)");
  return r;
}

void Region::unlink() {
  if (linked_) ::shm_unlink(name_.c_str());
  linked_ = false;
}

}  // namespace kizuna::transport::shm
