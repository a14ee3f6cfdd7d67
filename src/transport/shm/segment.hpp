// transport/shm/segment.hpp: a POSIX shared-memory segment, created by its
// owner and mapped by the peers of the same node.
//
// create() reserves the memory for real (posix_fallocate) so that a full
// /dev/shm is a clear SystemError now rather than a SIGBUS later, and
// initialises the header. map() opens a peer's segment and checks its
// header (magic, version, communicator). unlink() removes the name; the
// mapping stays valid until the Segment is destroyed, so a segment can be
// unlinked as soon as every peer has mapped it and a crash leaves nothing
// behind in /dev/shm.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/shm/layout.hpp"
#include "transport/shm/shared_file.hpp"

namespace kizuna::transport::shm {

class Segment {
 public:
  Segment() = default;

  static Segment create(const std::string& name, const Geometry& g, std::uint64_t comm_id, int owner);
  // `channels`: the ranks of the node, which the segment must have one
  // channel each for (this rank writes into its own).
  static Segment map(const std::string& name, std::uint64_t comm_id, int owner, std::uint32_t channels);

  void unlink() { file_.unlink(); }

  SegmentHeader* header() const { return reinterpret_cast<SegmentHeader*>(file_.data()); }
  const Geometry& geometry() const { return geometry_; }
  ChannelControl* channel(std::uint32_t c) const {
    return reinterpret_cast<ChannelControl*>(file_.data() + geometry_.channel_offset(c));
  }
  unsigned char* slot(std::uint32_t c, std::uint32_t s) const { return file_.data() + geometry_.slot_offset(c, s); }
  const std::string& name() const { return file_.name(); }

 private:
  SharedFile file_;
  Geometry geometry_;
};

// Bytes free in /dev/shm, or 0 when it cannot be told.
std::uint64_t shm_free_bytes();

// A segment keeps its name only while the communicator is set up, until
// every peer has mapped it; a rank killed in that window leaves it behind.
// Its name says until when that may take: segment_name() gives
// "/kizuna-PID-ID-RANK-DEADLINE", DEADLINE the set-up's end in seconds
// since the epoch.
std::string segment_name(int pid, std::uint64_t comm_id, int rank, std::chrono::system_clock::time_point deadline);

// Removes the segments named so that belong to this user, whose set-up
// ended more than a minute ago and whose process is gone (checked too,
// though a set-up that is over has unlinked its segment itself unless it
// was killed: a process in another PID namespace sharing /dev/shm would
// look gone from here). Returns the names removed.
std::vector<std::string> remove_stale_segments();

}  // namespace kizuna::transport::shm
