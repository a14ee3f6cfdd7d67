#include "transport/shm/shared_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/check.hpp"
#include "transport/shm/segment.hpp"

namespace kizuna::transport::shm {

SharedFile::~SharedFile() { release(); }

void SharedFile::release() noexcept {
  if (base_) ::munmap(base_, bytes_);
  if (linked_) ::shm_unlink(name_.c_str());
  base_ = nullptr;
  linked_ = false;
}

SharedFile::SharedFile(SharedFile&& o) noexcept { *this = std::move(o); }

SharedFile& SharedFile::operator=(SharedFile&& o) noexcept {
  if (this != &o) {
    release();
    base_ = std::exchange(o.base_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    name_ = std::move(o.name_);
    linked_ = std::exchange(o.linked_, false);
  }
  return *this;
}

SharedFile SharedFile::create(const std::string& name, std::size_t bytes) {
  SharedFile f;
  f.name_ = name;
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0)
    KIZUNA_THROW(ErrorCode::SystemError, "cannot create shared memory ", name, ": ", std::strerror(errno));
  f.linked_ = true;
  const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (rc != 0) {
    ::close(fd);
    KIZUNA_THROW(ErrorCode::SystemError, "cannot reserve ", bytes >> 10, " KiB of shared memory for ", name, ": ",
                 std::strerror(rc), " (is /dev/shm too small? free: ", shm_free_bytes() >> 20, " MiB)");
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED)
    KIZUNA_THROW(ErrorCode::SystemError, "cannot map shared memory ", name, ": ", std::strerror(errno));
  f.base_ = static_cast<unsigned char*>(p);
  f.bytes_ = bytes;
  // Every page written once (it is all zero already): see the header.
  std::memset(p, 0, bytes);
  return f;
}

SharedFile SharedFile::open(const std::string& name, int owner, std::size_t expected_bytes, bool populate) {
  SharedFile f;
  f.name_ = name;
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0)
    KIZUNA_THROW(ErrorCode::SystemError, "cannot open rank ", owner, "'s shared memory ", name, ": ",
                 std::strerror(errno));
  struct stat st {};
  const bool sized = ::fstat(fd, &st) == 0 && st.st_size > 0;
  const auto bytes = sized ? static_cast<std::size_t>(st.st_size) : 0;
  if (!sized || (expected_bytes != 0 && bytes != expected_bytes)) {
    ::close(fd);
    KIZUNA_THROW(ErrorCode::Mismatch, "rank ", owner, "'s shared memory ", name, " holds ", bytes, " bytes where ",
                 expected_bytes ? std::to_string(expected_bytes) : std::string("some"),
                 " were expected (stale or foreign)");
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
  ::close(fd);
  if (p == MAP_FAILED)
    KIZUNA_THROW(ErrorCode::SystemError, "cannot map rank ", owner, "'s shared memory ", name, ": ",
                 std::strerror(errno));
  f.base_ = static_cast<unsigned char*>(p);
  f.bytes_ = bytes;
  return f;
}

void SharedFile::unlink() {
  if (linked_) ::shm_unlink(name_.c_str());
  linked_ = false;
}

}  // namespace kizuna::transport::shm
