// transport/shm/shared_file.hpp: one POSIX shared-memory file, mapped: what
// a rank's slot segment (segment.hpp) and its symmetric regions (region.hpp)
// are made of.
//
// create() makes the file (it must not exist), reserves every page
// (posix_fallocate, so that a small /dev/shm is a clear SystemError now,
// not a SIGBUS later), maps it and writes every page once (a first touch
// costs a fault of 20-40 us on this project's virtual machines, even with
// the pages there, and must not land inside a collective). open() maps a
// peer's file whole, whatever its size: the caller checks that size and the
// header it finds. unlink() drops the name; the memory lives while any
// process maps it. The creator unlinks on destruction too, if it has not.
#pragma once

#include <cstddef>
#include <string>

namespace kizuna::transport::shm {

class SharedFile {
 public:
  SharedFile() = default;
  ~SharedFile();
  SharedFile(SharedFile&& other) noexcept;
  SharedFile& operator=(SharedFile&& other) noexcept;
  SharedFile(const SharedFile&) = delete;
  SharedFile& operator=(const SharedFile&) = delete;

  // Throws SystemError naming the file, and /dev/shm's free space when
  // the reservation fails.
  static SharedFile create(const std::string& name, std::size_t bytes);
  // `owner`: the rank whose file it is, for the errors. A file of other
  // than `expected_bytes` (unless 0: any size) is a Mismatch, found before
  // it is mapped. `populate`: enter every page in this process's tables
  // now (MAP_POPULATE).
  static SharedFile open(const std::string& name, int owner, std::size_t expected_bytes, bool populate);

  void unlink();

  unsigned char* data() const { return base_; }
  std::size_t bytes() const { return bytes_; }
  const std::string& name() const { return name_; }

 private:
  void release() noexcept;

  unsigned char* base_ = nullptr;
  std::size_t bytes_ = 0;
  std::string name_;
  bool linked_ = false;
};

}  // namespace kizuna::transport::shm
