// kizuna-store: run a standalone store server, or talk to one.
//
//   kizuna-store serve  [--host H] [--port P] [--world-size N] [--token-env] [--max-value-bytes SIZE]
//   kizuna-store get    --addr H:P [--timeout DUR] KEY
//   kizuna-store set    --addr H:P [--file PATH] KEY [VALUE|-]   ("-": the value from stdin)
//   kizuna-store add    --addr H:P KEY DELTA
//   kizuna-store wait   --addr H:P [--timeout DUR] KEY...
//   kizuna-store check  --addr H:P KEY...
//   kizuna-store delete --addr H:P KEY
//   kizuna-store keys   --addr H:P [PREFIX]
//
// serve is for multi-node jobs whose store lives on a host of its own; the
// client commands are for looking into a stuck rendezvous ("which ranks
// never published their address?"). Every command takes --help. A token
// comes from KIZUNA_STORE_TOKEN, never from the command line (where `ps`
// would show it); --token-env makes it mandatory.
//
// Exit status: 0 done (check: all keys present), 1 failed (the message is
// on stderr; check: a key is missing), 2 bad usage: a flag, an argument or
// a KIZUNA_* variable.
#include <kizuna/error.hpp>
#include <kizuna/tcp_store.hpp>
#include <kizuna/tcp_store_server.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/cli.hpp"
#include "core/env.hpp"
#include "core/launch_env.hpp"

namespace {

using namespace kizuna;

struct Command {
  const char* name;
  const char* usage;  // after "kizuna-store NAME "
  const char* summary;
  int min_args;
  int max_args;  // -1: any number

  bool serves() const { return std::string_view(name) == "serve"; }
};

const std::vector<Command>& commands() {
  static const std::vector<Command> list = {
      {"serve",
       "[--host H] [--port P] [--world-size N] [--token-env] [--max-value-bytes SIZE]",
       "run a store server until interrupted; prints the address it listens on.",
       0,
       0},
      {"get",
       "--addr HOST:PORT [--timeout DUR] KEY",
       "print the value of KEY, waiting for it up to the timeout (default KIZUNA_STORE_TIMEOUT)",
       1,
       1},
      {"set", "--addr HOST:PORT [--file PATH] KEY [VALUE|-]",
       "set KEY to VALUE; to what stdin holds with '-', or the file with --file", 1, 2},
      {"add", "--addr HOST:PORT KEY DELTA", "add DELTA to the counter at KEY; print the new value", 2, 2},
      {"wait", "--addr HOST:PORT [--timeout DUR] KEY...", "wait until every KEY exists", 1, -1},
      {"check", "--addr HOST:PORT KEY...", "print which KEYs exist; exit 0 when all do, 1 otherwise", 1, -1},
      {"delete", "--addr HOST:PORT KEY", "delete KEY", 1, 1},
      {"keys", "--addr HOST:PORT [PREFIX]", "list the keys (that start with PREFIX), sorted", 0, 1},
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

// What one command line asks for.
struct Invocation {
  TcpStoreOptions store;   // serve: where to listen; the others: the server to reach
  bool addr_given = false;
  bool token_env = false;  // --token-env: KIZUNA_STORE_TOKEN must be set
  std::vector<std::string> args;
  std::int64_t delta = 0;  // add's DELTA
  std::string file;        // set --file PATH
};

// The command's flags on `app`, setting `in`. Serve's --help lists them;
// the others' usage line says all there is. Given twice, the last counts.
void declare(CLI::App& app, const Command& c, Invocation& in) {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  tools::add_help(app, "");
  TcpStoreOptions& s = in.store;
  if (c.serves()) {
    s.host = "";  // every interface
    tools::add_value(app, "--host", "H", "address to listen on (default: every interface)",
                     [&s](const std::string& v) { s.host = v; });
    tools::add_value(app, "--port", "P", "port (default 0: the OS picks a free one)", [&s](const std::string& v) {
      s.port = static_cast<int>(core::parse_int("--port", v, 0, 65535));
    });
    tools::add_value(app, "--world-size", "N", "expect N clients to join; say when they have",
                     [&s](const std::string& v) {
                       s.world_size = static_cast<int>(core::parse_int("--world-size", v, 1, 1 << 24));
                     });
    tools::add_switch(app, "--token-env", "require KIZUNA_STORE_TOKEN (refuse to serve without authentication)",
                      [&in] { in.token_env = true; });
    tools::add_value(app, "--max-value-bytes", "S", "largest value accepted (default 64MiB)",
                     [&s](const std::string& v) { s.max_value_bytes = core::parse_size("--max-value-bytes", v); });
    return;
  }
  tools::add_value(app, "--addr", "HOST:PORT", "", [&in](const std::string& v) {
    core::split_host_port("--addr", v.rfind("tcp://", 0) == 0 ? v.substr(6) : v, in.store.host, in.store.port);
    if (in.store.port == 0) throw tools::UsageError("--addr needs the server's port, not 0");
    in.addr_given = true;
  });
  tools::add_value(app, "--timeout", "DUR", "",
                   [&s](const std::string& v) { s.timeout = core::parse_duration("--timeout", v); });
  tools::add_switch(app, "--token-env", "", [&in] { in.token_env = true; });
  if (std::string_view(c.name) == "set")
    tools::add_value(app, "--file", "PATH", "", [&in](const std::string& v) {
      if (v.empty()) throw tools::UsageError("--file is empty");
      in.file = v;
    });
}

// The command's arguments: the words its flags left, less a "--" that ends
// the flags. Before that, a word that starts with "--" is an unknown option.
std::vector<std::string> arguments(const CLI::App& app) {
  std::vector<std::string> args;
  bool flags_over = false;
  for (const std::string& word : app.remaining()) {
    const bool flag = !flags_over && word.rfind("--", 0) == 0;
    if (flag && word.size() == 2) flags_over = true;
    else if (flag) throw tools::UsageError(tools::unknown(word));
    else args.push_back(word);
  }
  return args;
}

// Parses the command's words (argv[0] is its name) into `in`; prints the
// command's help and returns false for --help. Throws on bad usage.
//
// Each command is a CLI::App of its own rather than a CLI11 subcommand, so
// that a key may be named like a command and "--" stays with the command.
bool parse(const Command& c, int argc, char** argv, Invocation& in) {
  CLI::App app;
  declare(app, c, in);
  if (!tools::parse(app, argc, argv)) {
    std::printf("usage: kizuna-store %s %s\n\n%s\n%s", c.name, c.usage, c.summary,
                tools::option_table(app, 23).c_str());
    return false;
  }
  in.args = arguments(app);
  const int n = static_cast<int>(in.args.size());
  if (n < c.min_args) throw tools::UsageError("missing arguments");
  if (c.max_args >= 0 && n > c.max_args) throw tools::UsageError("too many arguments");
  if (std::string_view(c.name) == "set" && (n == 2) == !in.file.empty())
    throw tools::UsageError(in.file.empty() ? "set needs a VALUE (or '-' for stdin, or --file PATH)"
                                            : "set takes its value from --file or from VALUE, not both");
  if (std::string_view(c.name) == "add") in.delta = core::parse_int("DELTA", in.args[1], INT64_MIN, INT64_MAX);
  if (!c.serves() && !in.addr_given) throw tools::UsageError("--addr HOST:PORT is required");
  return true;
}

std::optional<std::string> required_token(const Invocation& in) {
  const std::string& token = core::Env::get().store_token;
  if (in.token_env && token.empty())
    throw Error(ErrorCode::InvalidArgument, std::string("--token-env: KIZUNA_STORE_TOKEN is not set (or empty)"));
  return token;
}

int serve(TcpStoreOptions o) {
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

void print_bytes(const Bytes& value) {
  std::fwrite(value.data(), 1, value.size(), stdout);
  std::fputc('\n', stdout);
}

// set's value: VALUE, stdin for "-", or the file --file names, whole and
// byte for byte.
Bytes set_value(const Invocation& in) {
  if (in.file.empty() && in.args[1] != "-") return Bytes(in.args[1].begin(), in.args[1].end());
  std::FILE* f = in.file.empty() ? stdin : std::fopen(in.file.c_str(), "rb");
  if (f == nullptr)
    throw Error(ErrorCode::InvalidArgument, "--file " + in.file + ": " + std::strerror(errno));
  Bytes value;
  unsigned char buf[1 << 16];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) value.insert(value.end(), buf, buf + n);
  const bool failed = std::ferror(f) != 0;
  if (f != stdin) std::fclose(f);
  if (failed) throw Error(ErrorCode::SystemError, std::string("cannot read the value from ") +
                                                      (in.file.empty() ? "stdin" : in.file));
  return value;
}

int run(const Command& c, Invocation& in) {
  in.store.token = required_token(in);
  if (c.serves()) return serve(in.store);
  const std::string name = c.name;
  const auto& a = in.args;
  TcpStore store(in.store);
  if (name == "get") {
    print_bytes(store.get(a[0]));
  } else if (name == "set") {
    store.set(a[0], set_value(in));
  } else if (name == "add") {
    std::printf("%lld\n", static_cast<long long>(store.add(a[0], in.delta)));
  } else if (name == "wait") {
    store.wait(a);
  } else if (name == "check") {
    bool all = true;
    for (const auto& key : a) {
      const bool there = store.check({key});
      all = all && there;
      std::printf("%s %s\n", there ? "present" : "missing", key.c_str());
    }
    return all ? 0 : 1;
  } else if (name == "delete") {
    if (!store.delete_key(a[0])) {
      std::fprintf(stderr, "kizuna-store delete: no key '%s'\n", a[0].c_str());
      return 1;
    }
  } else if (name == "keys") {
    for (const auto& key : store.list_keys(a.empty() ? "" : a[0]))
      std::printf("%s\n", key.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_overview(stderr);
    return tools::kUsageExit;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_overview(stdout);
    return 0;
  }
  const auto& list = commands();
  const auto c = std::find_if(list.begin(), list.end(), [&](const Command& c) { return name == c.name; });
  if (c == list.end()) {
    std::fprintf(stderr, "kizuna-store: unknown command '%s'\n", name.c_str());
    print_overview(stderr);
    return tools::kUsageExit;
  }
  Invocation in;
  try {
    if (!parse(*c, argc - 1, argv + 1, in)) return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kizuna-store %s: %s\nusage: kizuna-store %s %s\n", c->name, e.what(), c->name, c->usage);
    return tools::kUsageExit;
  }
  try {
    tools::check_environment();
    return run(*c, in);
  } catch (const tools::UsageError& e) {
    std::fprintf(stderr, "kizuna-store %s: %s\n", c->name, e.what());
    return tools::kUsageExit;
  } catch (const Error& e) {
    std::fprintf(stderr, "kizuna-store %s: %s\n", c->name, e.what());
    return 1;
  }
}
