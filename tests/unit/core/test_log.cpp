#include <catch2/catch.hpp>

#include <string>

#include "core/env.hpp"
#include "core/log.hpp"
#include "stderr_of.hpp"

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
  const std::string text = kizuna::test::stderr_of([] {
    set_log_level(LogLevel::Info);
    set_log_rank(5);
    KIZUNA_LOG(Info) << "hello " << 42;
  });
  set_log_level(LogLevel::Warn);
  const std::string line = text.substr(0, text.find('\n'));
  CHECK(line.find("kizuna[r5] I hello 42") != std::string::npos);
  CHECK(line.size() > 23);
  CHECK(line[4] == '-');  // starts with the date
}
