#include <catch2/catch.hpp>

#include <unistd.h>

#include <fstream>
#include <sstream>

#include "core/env.hpp"
#include "core/log.hpp"

using namespace kizuna::core;

TEST_CASE("log levels parse and filter", "[log]") {
  CHECK(parse_log_level("info") == LogLevel::Info);
  CHECK(parse_log_level("warning") == LogLevel::Warn);
  CHECK_THROWS(parse_log_level("chatty"));
  set_log_level(LogLevel::Warn);
  CHECK(log_enabled(LogLevel::Error));
  CHECK(log_enabled(LogLevel::Warn));
  CHECK_FALSE(log_enabled(LogLevel::Info));
  int evaluated = 0;
  KIZUNA_LOG(Debug) << ++evaluated;
  CHECK(evaluated == 0);
}

TEST_CASE("a log line carries time, rank and level", "[log]") {
  // Redirect stderr to a file for the duration of one line.
  char path[] = "/tmp/kizuna-log-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  const int saved = ::dup(2);
  ::dup2(fd, 2);
  set_log_level(LogLevel::Info);
  set_log_rank(5);
  KIZUNA_LOG(Info) << "hello " << 42;
  ::dup2(saved, 2);
  ::close(saved);
  ::close(fd);
  set_log_level(LogLevel::Warn);
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  ::unlink(path);
  CHECK(line.find("kizuna[r5] I hello 42") != std::string::npos);
  CHECK(line.size() > 23);
  CHECK(line[4] == '-');  // starts with the date
}
