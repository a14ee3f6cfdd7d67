// kizuna-store: run a standalone store server, or talk to one.
//
//   kizuna-store serve [--host H] [--port P] [--world-size N] [--token-env] [--max-value-bytes
//   SIZE] kizuna-store get    --addr H:P [--timeout DUR] KEY kizuna-store set    --addr H:P KEY
//   VALUE kizuna-store add    --addr H:P KEY DELTA kizuna-store wait   --addr H:P [--timeout DUR]
//   KEY... kizuna-store check  --addr H:P KEY... kizuna-store delete --addr H:P KEY kizuna-store
//   keys   --addr H:P [PREFIX]
//
// serve is for multi-node jobs whose store lives on a host of its own; the
// client commands are for looking into a stuck rendezvous ("which ranks
// never published their address?"). Every command takes --help. A token
// comes from KIZUNA_STORE_TOKEN, never from the command line (where `ps`
// would show it); --token-env makes it mandatory.
//
// Exit status: 0 done (check: all keys present), 1 failed (the message is
// on stderr; check: a key is missing), 2 bad usage.
#include <kizuna/error.hpp>
#include <kizuna/tcp_store.hpp>
#include <kizuna/tcp_store_server.hpp>

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/env.hpp"
#include "core/launch_env.hpp"

namespace {

using namespace kizuna;

struct Command {
  const char* name;
  const char* usage;  // after "kizuna-store NAME "
  const char* summary;
  std::vector<std::string> value_flags;  // flags that take a value
  std::vector<std::string> bool_flags;
  int min_args;
  int max_args;  // -1: any number
};

const std::vector<Command>& commands() {
  static const std::vector<Command> list = {
      {"serve",
       "[--host H] [--port P] [--world-size N] [--token-env] [--max-value-bytes SIZE]",
       "run a store server until interrupted; prints the address it listens on.\n"
       "  --host H             address to listen on (default: every interface)\n"
       "  --port P             port (default 0: the OS picks a free one)\n"
       "  --world-size N       expect N clients to join; say when they have\n"
       "  --token-env          require KIZUNA_STORE_TOKEN (refuse to serve without "
       "authentication)\n"
       "  --max-value-bytes S  largest value accepted (default 64MiB)",
       {"--host", "--port", "--world-size", "--max-value-bytes"},
       {"--token-env"},
       0,
       0},
      {"get",
       "--addr HOST:PORT [--timeout DUR] KEY",
       "print the value of KEY, waiting for it up to the timeout (default KIZUNA_STORE_TIMEOUT)",
       {"--addr", "--timeout"},
       {"--token-env"},
       1,
       1},
      {"set",
       "--addr HOST:PORT KEY VALUE",
       "set KEY to VALUE",
       {"--addr", "--timeout"},
       {"--token-env"},
       2,
       2},
      {"add",
       "--addr HOST:PORT KEY DELTA",
       "add DELTA to the counter at KEY; print the new value",
       {"--addr", "--timeout"},
       {"--token-env"},
       2,
       2},
      {"wait",
       "--addr HOST:PORT [--timeout DUR] KEY...",
       "wait until every KEY exists",
       {"--addr", "--timeout"},
       {"--token-env"},
       1,
       -1},
      {"check",
       "--addr HOST:PORT KEY...",
       "print which KEYs exist; exit 0 when all do, 1 otherwise",
       {"--addr", "--timeout"},
       {"--token-env"},
       1,
       -1},
      {"delete",
       "--addr HOST:PORT KEY",
       "delete KEY",
       {"--addr", "--timeout"},
       {"--token-env"},
       1,
       1},
      {"keys",
       "--addr HOST:PORT [PREFIX]",
       "list the keys (that start with PREFIX), sorted",
       {"--addr", "--timeout"},
       {"--token-env"},
       0,
       1},
  };
  return list;
}

void print_overview(std::FILE* out) {
  std::fprintf(out, "usage: kizuna-store COMMAND [options]\n\ncommands:\n");
  for (const Command& c : commands()) std::fprintf(out, "  %-7s %s\n", c.name, c.usage);
  std::fprintf(out,
               "\nkizuna-store COMMAND --help describes one. The token, when the store needs one,\n"
               "comes from KIZUNA_STORE_TOKEN.\n");
}

[[noreturn]] void usage_error(const Command& c, const std::string& problem) {
  std::fprintf(stderr, "kizuna-store %s: %s\nusage: kizuna-store %s %s\n", c.name, problem.c_str(),
               c.name, c.usage);
  std::exit(2);
}

struct Parsed {
  std::map<std::string, std::string> values;
  std::map<std::string, bool> flags;
  std::vector<std::string> args;
};

Parsed parse(const Command& c, int argc, char** argv) {
  Parsed p;
  auto has = [](const std::vector<std::string>& list, const std::string& s) {
    for (const auto& x : list)
      if (x == s) return true;
    return false;
  };
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("usage: kizuna-store %s %s\n\n%s\n", c.name, c.usage, c.summary);
      std::exit(0);
    }
    if (arg == "--") {
      for (++i; i < argc; ++i) p.args.emplace_back(argv[i]);
      break;
    }
    if (arg.size() > 2 && arg.rfind("--", 0) == 0) {
      std::string value;
      bool inline_value = false;
      if (const auto eq = arg.find('='); eq != std::string::npos) {
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
        inline_value = true;
      }
      if (has(c.bool_flags, arg) && !inline_value) {
        p.flags[arg] = true;
      } else if (has(c.value_flags, arg)) {
        if (!inline_value) {
          if (i + 1 >= argc) usage_error(c, arg + " needs a value");
          value = argv[++i];
        }
        p.values[arg] = value;
      } else {
        usage_error(c, "unknown option '" + arg + "'");
      }
      continue;
    }
    p.args.push_back(arg);
  }
  const int n = static_cast<int>(p.args.size());
  if (n < c.min_args || (c.max_args >= 0 && n > c.max_args))
    usage_error(c, n < c.min_args ? "missing arguments" : "too many arguments");
  return p;
}

// Parses an option's value; a bad one is a usage error (exit 2).
template <typename Parse>
auto checked(const Command& c, Parse&& parse) {
  try {
    return parse();
  } catch (const Error& e) {
    usage_error(c, e.what());
  }
}

std::optional<std::string> required_token(const Command& c, const Parsed& p) {
  const std::string& token = core::Env::get().store_token;
  if (p.flags.count("--token-env") && token.empty())
    throw Error(ErrorCode::InvalidArgument,
                std::string("--token-env: KIZUNA_STORE_TOKEN is not set (or empty)"));
  return token;
}

int serve(const Command& c, const Parsed& p) {
  TcpStoreOptions o;
  o.host = p.values.count("--host") ? p.values.at("--host") : "";
  if (p.values.count("--port"))
    o.port = checked(c, [&] {
      return static_cast<int>(core::parse_int("--port", p.values.at("--port"), 0, 65535));
    });
  if (p.values.count("--world-size"))
    o.world_size = checked(c, [&] {
      return static_cast<int>(
          core::parse_int("--world-size", p.values.at("--world-size"), 1, 1 << 24));
    });
  if (p.values.count("--max-value-bytes"))
    o.max_value_bytes = checked(
        c, [&] { return core::parse_size("--max-value-bytes", p.values.at("--max-value-bytes")); });
  o.token = required_token(c, p);

  // Block the signals before the server's thread starts, so that it inherits
  // the mask and this thread alone receives them, with sigtimedwait.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  TcpStoreServer server(o);
  std::printf("kizuna-store: serving on %s%s\n", server.address().c_str(),
              o.token->empty() ? "" : " (token required)");
  std::fflush(stdout);

  bool announced = !o.world_size;
  for (;;) {
    timespec tick{0, 200'000'000};
    const int sig = sigtimedwait(&stop, nullptr, &tick);
    if (sig > 0) {
      std::printf("kizuna-store: stopping (%s)\n", strsignal(sig));
      std::fflush(stdout);
      return 0;
    }
    if (!announced && server.num_joined() >= *o.world_size) {
      std::printf("kizuna-store: all %d clients joined\n", *o.world_size);
      std::fflush(stdout);
      announced = true;
    }
  }
}

std::unique_ptr<TcpStore> connect(const Command& c, const Parsed& p) {
  if (!p.values.count("--addr")) usage_error(c, "--addr HOST:PORT is required");
  std::string address = p.values.at("--addr");
  if (address.rfind("tcp://", 0) == 0) address = address.substr(6);
  TcpStoreOptions o;
  checked(c, [&] {
    core::split_host_port("--addr", address, o.host, o.port);
    return 0;
  });
  if (o.port == 0) usage_error(c, "--addr needs the server's port, not 0");
  if (p.values.count("--timeout"))
    o.timeout =
        checked(c, [&] { return core::parse_duration("--timeout", p.values.at("--timeout")); });
  o.token = required_token(c, p);
  return std::make_unique<TcpStore>(o);
}

void print_bytes(const Bytes& value) {
  std::fwrite(value.data(), 1, value.size(), stdout);
  std::fputc('\n', stdout);
}

int run(const Command& c, const Parsed& p) {
  const std::string name = c.name;
  if (name == "serve") return serve(c, p);
  const auto& a = p.args;
  std::int64_t delta = 0;
  if (name == "add")
    delta = checked(c, [&] { return core::parse_int("DELTA", a[1], INT64_MIN, INT64_MAX); });
  auto store = connect(c, p);
  if (name == "get") {
    print_bytes(store->get(a[0]));
  } else if (name == "set") {
    store->set(a[0], std::string_view(a[1]));
  } else if (name == "add") {
    std::printf("%lld\n", static_cast<long long>(store->add(a[0], delta)));
  } else if (name == "wait") {
    store->wait(a);
  } else if (name == "check") {
    bool all = true;
    for (const auto& key : a) {
      const bool there = store->check({key});
      all = all && there;
      std::printf("%s %s\n", there ? "present" : "missing", key.c_str());
    }
    return all ? 0 : 1;
  } else if (name == "delete") {
    if (!store->delete_key(a[0])) {
      std::fprintf(stderr, "kizuna-store delete: no key '%s'\n", a[0].c_str());
      return 1;
    }
  } else if (name == "keys") {
    for (const auto& key : store->list_keys(a.empty() ? "" : a[0]))
      std::printf("%s\n", key.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_overview(stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_overview(stdout);
    return 0;
  }
  for (const Command& c : commands()) {
    if (name != c.name) continue;
    const Parsed parsed = parse(c, argc - 2, argv + 2);
    try {
      return run(c, parsed);
    } catch (const Error& e) {
      std::fprintf(stderr, "kizuna-store %s: %s\n", c.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "kizuna-store: unknown command '%s'\n", name.c_str());
  print_overview(stderr);
  return 2;
}
