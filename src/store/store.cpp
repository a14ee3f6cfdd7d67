// Store's factories: from_url and from_env.
#include <kizuna/prefix_store.hpp>
#include <kizuna/store.hpp>
#include <kizuna/tcp_store.hpp>

#include "core/check.hpp"
#include "core/env.hpp"
#include "store/from_env.hpp"

namespace kizuna {
namespace store {

void parse_store_url(const std::string& url, std::string& host, int& port) {
  std::string address = url;
  if (address.rfind("tcp://", 0) == 0) {
    address = address.substr(6);
  } else if (address.find("://") != std::string::npos) {
    KIZUNA_THROW(ErrorCode::InvalidArgument, "store URL '", url,
                 "' has an unsupported scheme; expected tcp://host:port or host:port");
  }
  core::split_host_port("store URL", address, host, port);
  KIZUNA_CHECK_ARG(port > 0, "store URL '", url,
                   "' has port 0; a client needs the server's real port");
}

std::shared_ptr<Store> from_launch_env(const core::LaunchEnv& launch,
                                       std::chrono::milliseconds timeout,
                                       const std::string& token) {
  launch.require_rank();
  launch.require_store();
  KIZUNA_CHECK_ARG(launch.store_port > 0 || launch.world_size == 1, "the store port is 0 (from ",
                   launch.store_source, "), but ", launch.world_size,
                   " ranks must find the store: choose a port (e.g. MASTER_PORT=29500)");
  TcpStoreOptions options;
  options.host = launch.store_host;
  options.port = launch.store_port;
  // KIZUNA_STORE names a store that already runs (kizuna-store serve, or the
  // one kizuna-run hosts): every rank is a client. With MASTER_ADDR and
  // MASTER_PORT rank 0 hosts it, as torch.distributed does.
  const bool external = launch.store_source == "KIZUNA_STORE";
  options.is_server = launch.rank == 0 && !external;
  if (options.is_server) options.host = "";  // listen on every interface, as torch does
  if (!external) options.world_size = launch.world_size;
  options.timeout = timeout;
  options.token = token;
  return std::make_shared<TcpStore>(options);
}

}  // namespace store

std::shared_ptr<Store> Store::from_url(const std::string& url) {
  TcpStoreOptions options;
  store::parse_store_url(url, options.host, options.port);
  return std::make_shared<TcpStore>(options);
}

std::shared_ptr<Store> Store::from_env() {
  const core::Env& env = core::Env::get();
  auto store =
      store::from_launch_env(core::LaunchEnv::from_process(), env.store_timeout, env.store_token);
  // KIZUNA_STORE_PREFIX (kizuna-run sets one per restart round): every key
  // of this process lives under it, so a new round never sees stale keys.
  if (env.store_prefix.empty()) return store;
  return std::make_shared<PrefixStore>(env.store_prefix, std::move(store));
}

}  // namespace kizuna
