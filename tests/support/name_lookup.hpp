// tests/support/name_lookup.hpp: whether this machine's resolver says at
// once that a name does not exist. Tests of "a host name that does not
// resolve" need it: where the name server does not answer, the lookup ends
// in a temporary failure after seconds, which kizuna rightly retries.
#pragma once

#include <netdb.h>
#include <sys/socket.h>

#include <chrono>
#include <string>

namespace kizuna::test {

// True when looking `name` up fails with "no such name" within 2 s.
inline bool resolver_denies(const std::string& name) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const auto start = std::chrono::steady_clock::now();
  const int error = ::getaddrinfo(name.c_str(), nullptr, &hints, &found);
  if (found) ::freeaddrinfo(found);
  return error == EAI_NONAME && std::chrono::steady_clock::now() - start < std::chrono::seconds(2);
}

}  // namespace kizuna::test
