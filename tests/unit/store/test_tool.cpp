// The kizuna-store tool, run as a user would: `serve` in the background,
// then set/get/add/wait/check/keys/delete against it, bad flags, --help and
// a token from the environment.
#include <catch2/catch.hpp>

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <regex>
#include <string>
#include <vector>

extern char** environ;

using namespace std::chrono_literals;

namespace {

const std::string kTool = KIZUNA_STORE_TOOL;

struct Result {
  int status;
  std::string output;  // stdout and stderr together
};

// Runs a shell command line; the tool's own --timeout bounds every wait.
Result run(const std::string& command) {
  std::FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string output;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) output.append(buf, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), output};
}

// `kizuna-store serve` in the background, stopped with SIGTERM.
class Server {
 public:
  explicit Server(std::vector<std::string> args, std::vector<std::string> env_extra = {}) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    std::vector<std::string> argv_s = {kTool, "serve"};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_s;
    for (char** e = environ; *e; ++e)
      if (std::string(*e).rfind("KIZUNA_STORE_TOKEN=", 0) != 0) env_s.emplace_back(*e);
    env_s.insert(env_s.end(), env_extra.begin(), env_extra.end());
    std::vector<char*> envp;
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);
    REQUIRE(::posix_spawn(&pid_, kTool.c_str(), &actions, nullptr, argv.data(), envp.data()) == 0);
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    out_ = fds[0];
  }

  ~Server() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) ::close(out_);
  }

  // The next line the server prints, within a deadline.
  std::string line(std::chrono::milliseconds deadline = 30s) {
    const auto until = std::chrono::steady_clock::now() + deadline;
    for (;;) {
      if (const auto nl = buffer_.find('\n'); nl != std::string::npos) {
        std::string out = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return out;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "(no line before the deadline)";
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[256];
      const ssize_t n = ::read(out_, buf, sizeof buf);
      if (n <= 0) return "(the server exited)";
      buffer_.append(buf, static_cast<std::size_t>(n));
    }
  }

  // SIGTERM, then the exit status.
  int stop() {
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  std::string buffer_;
};

// "kizuna-store: serving on 127.0.0.1:41234" -> "127.0.0.1:41234"
std::string address_of(const std::string& line) {
  std::smatch m;
  const std::regex re("serving on ([0-9.]+:[0-9]+)");
  REQUIRE(std::regex_search(line, m, re));
  return m[1];
}

}  // namespace

TEST_CASE("kizuna-store serve, then set, get, add, wait, check, keys, delete", "[tool]") {
  Server server({"--host", "127.0.0.1", "--port", "0"});
  const std::string first = server.line();
  INFO(first);
  const std::string addr = address_of(first);
  const std::string tool = kTool + " ";
  const std::string at = " --addr " + addr + " --timeout 30s ";
  const std::string env = "env -u KIZUNA_STORE_TOKEN ";

  CHECK(run(env + tool + "set" + at + "greeting hello").status == 0);
  Result r = run(env + tool + "get" + at + "greeting");
  CHECK(r.status == 0);
  CHECK(r.output == "hello\n");
  r = run(env + tool + "add" + at + "counter 5");
  CHECK(r.output == "5\n");
  r = run(env + tool + "add" + at + "counter -2");
  CHECK(r.output == "3\n");
  CHECK(run(env + tool + "wait" + at + "greeting counter").status == 0);
  r = run(env + tool + "check" + at + "greeting absent");
  CHECK(r.status == 1);
  CHECK(r.output == "present greeting\nmissing absent\n");
  r = run(env + tool + "keys" + at);
  CHECK(r.output == "counter\ngreeting\n");
  CHECK(run(env + tool + "delete" + at + "greeting").status == 0);
  CHECK(run(env + tool + "delete" + at + "greeting").status == 1);
  r = run(env + kTool + " get --addr " + addr + " --timeout 100ms absent");
  CHECK(r.status == 1);
  CHECK_THAT(r.output,
             Catch::Contains("timed out after 100 ms waiting for key 'absent' at store " + addr));
  CHECK(server.stop() == 0);
}

TEST_CASE("kizuna-store set takes its value from stdin or --file, and a value over the server's limit says so",
          "[tool]") {
  Server server({"--host", "127.0.0.1", "--port", "0", "--max-value-bytes", "1M"});
  const std::string addr = address_of(server.line());
  const std::string tool = "env -u KIZUNA_STORE_TOKEN " + kTool + " ";
  const std::string at = " --addr " + addr + " --timeout 30s ";
  CHECK(run("printf 'line one\\nline two' | " + tool + "set" + at + "from-stdin -").status == 0);
  Result r = run(tool + "get" + at + "from-stdin");
  CHECK(r.output == "line one\nline two\n");
  char path[] = "/tmp/kizuna-store-value-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  const std::string bytes(300000, 'x');  // larger than a command line is comfortable with
  REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  ::close(fd);
  CHECK(run(tool + "set" + at + "--file " + std::string(path) + " from-file").status == 0);
  r = run(tool + "get" + at + "from-file");
  CHECK(r.output == bytes + "\n");
  ::unlink(path);
  // Over the server's 1 MiB: the client's own limit is 64 MiB, the server
  // closes the connection; the message names the limit.
  r = run("head -c 2000000 /dev/zero | " + tool + "set" + at + "too-big -");
  CHECK(r.status != 0);
  CHECK_THAT(r.output, Catch::Contains("on a value over its limit") && Catch::Contains("--max-value-bytes"));
  for (const char* bad : {" set --addr 127.0.0.1:1 --file /nonexistent k", " set --addr 127.0.0.1:1 --file x k v"}) {
    INFO(bad);
    r = run(kTool + bad);
    CHECK(r.status != 0);
  }
  CHECK(server.stop() == 0);
}

TEST_CASE("kizuna-store: --help, and bad flags give a usage line and exit 2", "[tool]") {
  Result r = run(kTool + " --help");
  CHECK(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("serve"));
  r = run(kTool + " get --help");
  CHECK(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("usage: kizuna-store get --addr HOST:PORT"));
  for (const char* bad : {" get --addr 127.0.0.1:1 --bogus k", " serve --port notaport", " get k",
                          " set --addr 127.0.0.1:1 onlykey", " frobnicate", ""}) {
    INFO(bad);
    r = run(kTool + bad);
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Catch::Contains("usage: kizuna-store"));
  }
}

TEST_CASE("kizuna-store serve --token-env authenticates with KIZUNA_STORE_TOKEN", "[tool]") {
  {
    Server refused({"--port", "0", "--token-env"});
    CHECK_THAT(refused.line(), Catch::Contains("(the server exited)"));
  }
  Server server({"--host", "127.0.0.1", "--port", "0", "--token-env", "--world-size", "1"},
                {"KIZUNA_STORE_TOKEN=tool-secret"});
  const std::string first = server.line();
  INFO(first);
  CHECK_THAT(first, Catch::Contains("token required"));
  const std::string addr = address_of(first);
  Result r = run("env -u KIZUNA_STORE_TOKEN " + kTool + " set --addr " + addr + " k v");
  CHECK(r.status == 1);
  CHECK_THAT(r.output,
             Catch::Contains("store at " + addr + " requires a token: set KIZUNA_STORE_TOKEN"));
  r = run("KIZUNA_STORE_TOKEN=wrong " + kTool + " set --addr " + addr + " k v");
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Catch::Contains("authentication failed"));
  r = run("KIZUNA_STORE_TOKEN=tool-secret " + kTool + " set --addr " + addr + " k v");
  CHECK(r.status == 0);
  r = run("KIZUNA_STORE_TOKEN=tool-secret " + kTool + " get --addr " + addr + " k");
  CHECK(r.output == "v\n");
  CHECK(server.stop() == 0);
}
