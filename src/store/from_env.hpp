// store/from_env.hpp: the Store a launched process rendezvous through.
//
// Store::from_env() is from_launch_env(LaunchEnv::from_process(), ...) with
// KIZUNA_STORE_TIMEOUT and KIZUNA_STORE_TOKEN, wrapped in a PrefixStore when
// KIZUNA_STORE_PREFIX is set; this entry point takes them as arguments so
// that tests can run several ranks as threads of one process.
//
// With MASTER_ADDR/MASTER_PORT, rank 0 hosts the TcpStoreServer (listening
// on every interface, at the store port) and every rank, rank 0 included, is
// a client that joins with the world size: each returns once all ranks have
// connected, or throws Timeout naming how many did. With KIZUNA_STORE the
// store already runs elsewhere (kizuna-store serve, kizuna-run): every rank
// is a plain client.
#pragma once

#include <kizuna/store.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "core/launch_env.hpp"

namespace kizuna::store {

std::shared_ptr<Store> from_launch_env(const core::LaunchEnv& launch,
                                       std::chrono::milliseconds timeout, const std::string& token);

// "tcp://host:port" or "host:port" -> host and port; InvalidArgument naming
// the URL otherwise.
void parse_store_url(const std::string& url, std::string& host, int& port);

}  // namespace kizuna::store
