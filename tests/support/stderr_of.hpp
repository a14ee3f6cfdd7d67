// tests/support/stderr_of.hpp: what a piece of code writes to stderr (file
// descriptor 2, where log lines go), by pointing descriptor 2 at a
// temporary file while it runs.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace kizuna::test {

template <typename Fn>
std::string stderr_of(Fn&& fn) {
  char path[] = "/tmp/kizuna-stderr-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) throw std::runtime_error("stderr_of: mkstemp failed");
  const int saved = ::dup(2);
  ::dup2(fd, 2);
  auto restore = [&] {
    ::dup2(saved, 2);
    ::close(saved);
    ::close(fd);
  };
  try {
    fn();
  } catch (...) {
    restore();
    ::unlink(path);
    throw;
  }
  restore();
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  ::unlink(path);
  return text.str();
}

}  // namespace kizuna::test
