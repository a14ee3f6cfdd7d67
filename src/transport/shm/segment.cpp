#include "transport/shm/segment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>
#include <new>

#include "core/check.hpp"

namespace kizuna::transport::shm {

Segment Segment::create(const std::string& name, const Geometry& g, std::uint64_t comm_id, int owner) {
  KIZUNA_CHECK_ARG(g.valid(), "shared memory ", name, ": ", g.channels, " channels of ", g.slots,
                   " slots of ", g.slot_bytes, " bytes (slots must be a power of two)");
  Segment s;
  s.geometry_ = g;
  // Every page reserved and written once (shared_file.hpp): a first touch
  // inside a collective made the first 16 small all-reduces of a job, one
  // per slot, take 20-40 us instead of 1. Peers warm what they write
  // (ShmLink).
  s.file_ = SharedFile::create(name, g.total_bytes());
  auto* h = new (s.file_.data()) SegmentHeader{};
  h->version = kSegmentVersion;
  h->channels = g.channels;
  h->slot_bytes = g.slot_bytes;
  h->slots = g.slots;
  h->owner_rank = static_cast<std::uint32_t>(owner);
  h->comm_id = comm_id;
  h->doorbell.store(0);
  h->sleeping.store(0);
  h->light_ring.store(0);
  for (std::uint32_t c = 0; c < g.channels; ++c) new (s.channel(c)) ChannelControl{};
  // Peers map the segment only after its name reaches them through the
  // store, which orders these writes before their reads.
  h->magic = kSegmentMagic;
  return s;
}

Segment Segment::map(const std::string& name, std::uint64_t comm_id, int owner, std::uint32_t channels) {
  Segment s;
  s.file_ = SharedFile::open(name, owner, 0, false);
  if (s.file_.bytes() < sizeof(SegmentHeader))
    KIZUNA_THROW(ErrorCode::Mismatch, "rank ", owner, "'s shared memory ", name, " is too small");
  const SegmentHeader* h = s.header();
  if (h->magic != kSegmentMagic || h->version != kSegmentVersion || h->comm_id != comm_id ||
      h->owner_rank != static_cast<std::uint32_t>(owner))
    KIZUNA_THROW(ErrorCode::Mismatch, "shared memory ", name, " is not rank ", owner,
                 "'s segment of this communicator (stale or foreign)");
  s.geometry_ = Geometry{h->channels, h->slots, h->slot_bytes};
  if (!s.geometry_.valid())
    KIZUNA_THROW(ErrorCode::Mismatch, "rank ", owner, "'s shared memory ", name, " declares ", h->channels,
                 " channels of ", h->slots, " slots of ", h->slot_bytes, " bytes, which no kizuna segment has");
  if (s.geometry_.channels != channels)
    KIZUNA_THROW(ErrorCode::Mismatch, "rank ", owner, "'s shared memory ", name, " has ", s.geometry_.channels,
                 " channels where this node has ", channels, " ranks (stale or foreign)");
  // No more than KIZUNA_SHM_BYTES allows a channel (1 GiB): a sparse file
  // can be as large as it likes, and the link keeps one pointer per slot.
  if (std::uint64_t{s.geometry_.slots} * s.geometry_.slot_bytes > kMaxChannelBytes)
    KIZUNA_THROW(ErrorCode::Mismatch, "rank ", owner, "'s shared memory ", name, " declares ", s.geometry_.slots,
                 " slots of ", s.geometry_.slot_bytes, " bytes, more than a channel may hold (",
                 kMaxChannelBytes >> 20, " MiB)");
  if (s.geometry_.total_bytes() > s.file_.bytes())
    KIZUNA_THROW(ErrorCode::Mismatch, "rank ", owner, "'s shared memory ", name, " is truncated");
  return s;
}

std::string segment_name(int pid, std::uint64_t comm_id, int rank, std::chrono::system_clock::time_point deadline) {
  char name[96];
  std::snprintf(name, sizeof name, "/kizuna-%d-%llx-%d-%lld", pid, static_cast<unsigned long long>(comm_id), rank,
                static_cast<long long>(std::chrono::system_clock::to_time_t(deadline)));
  return name;
}

std::vector<std::string> remove_stale_segments() {
  std::vector<std::string> removed;
  DIR* dir = ::opendir("/dev/shm");
  if (!dir) return removed;
  const long long now = static_cast<long long>(std::time(nullptr));
  while (const dirent* e = ::readdir(dir)) {
    // kizuna-<pid>-<hex id>-<rank>-<deadline>, as segment_name() makes them; nothing else.
    unsigned long pid = 0, rank = 0;
    unsigned long long id = 0;
    long long deadline = 0;
    int end = 0;
    if (std::sscanf(e->d_name, "kizuna-%lu-%llx-%lu-%lld%n", &pid, &id, &rank, &deadline, &end) != 4 ||
        e->d_name[end] != '\0' || e->d_name[7] < '1' || e->d_name[7] > '9' || pid > 0x7fffffff ||
        deadline + 60 > now)
      continue;
    struct stat st {};
    if (::fstatat(::dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
        st.st_uid != ::geteuid())
      continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to tell
    const std::string name = std::string("/") + e->d_name;
    if (::shm_unlink(name.c_str()) == 0) removed.push_back(name);
  }
  ::closedir(dir);
  return removed;
}

std::uint64_t shm_free_bytes() {
  struct statvfs v {};
  if (::statvfs("/dev/shm", &v) != 0) return 0;
  return static_cast<std::uint64_t>(v.f_bavail) * v.f_frsize;
}

}  // namespace kizuna::transport::shm
