// The real posenc-server binary (POSENC_SERVER_PATH, the environment's first) as a child process,
// for the tests that signal it (drain_test.cc, scaleout_test.cc). Its stdout and stderr are
// collected by a reader thread; the destructor kills (SIGKILL) and reaps a child that is still
// running. Every wait is bounded.
#ifndef POSENC_TESTS_SERVER_SERVER_PROCESS_H_
#define POSENC_TESTS_SERVER_SERVER_PROCESS_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace posenc::server::testing {

class ServerProcess {
 public:
  using Clock = std::chrono::steady_clock;

  explicit ServerProcess(const std::vector<std::string>& args) {
    int fds[2];
    if (pipe(fds) != 0) return;
    // POSENC_SERVER_PATH in the environment overrides the build's binary (a GPU machine's bundle).
    const char* env = std::getenv("POSENC_SERVER_PATH");
    std::vector<std::string> argv_storage = {env != nullptr && *env != '\0' ? env
                                                                            : POSENC_SERVER_PATH};
    argv_storage.insert(argv_storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_storage) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], STDOUT_FILENO);
      dup2(fds[1], STDERR_FILENO);
      close(fds[0]);
      close(fds[1]);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fds[1]);
    if (pid_ < 0) {
      close(fds[0]);
      return;
    }
    reader_ = std::thread([this, fd = fds[0]] {
      char buffer[4096];
      for (;;) {
        const ssize_t n = read(fd, buffer, sizeof(buffer));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        std::lock_guard<std::mutex> lock(mu_);
        output_.append(buffer, static_cast<size_t>(n));
      }
      close(fd);
    });
  }

  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  ~ServerProcess() {
    if (pid_ > 0 && !exit_status_.has_value()) {
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
    if (reader_.joinable()) reader_.join();
  }

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

  std::string output() {
    std::lock_guard<std::mutex> lock(mu_);
    return output_;
  }

  // The port from the "listening on HOST:PORT" line, or 0 when it did not come in `timeout`.
  int WaitForPort(std::chrono::seconds timeout) {
    return WaitForLinePort("listening on ", timeout);
  }

  // The port of the "metrics on http://HOST:PORT/metrics" line (--metrics_address), or 0.
  int WaitForMetricsPort(std::chrono::seconds timeout) {
    return WaitForLinePort("metrics on http://", timeout);
  }

  // The wait status once the child has exited within `timeout`, else nullopt.
  std::optional<int> WaitForExit(std::chrono::milliseconds timeout) {
    if (exit_status_.has_value()) return exit_status_;
    const auto end = Clock::now() + timeout;
    for (;;) {
      int status = 0;
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exit_status_ = status;
        return exit_status_;
      }
      if (r < 0 || Clock::now() >= end) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

 private:
  // The number after the last ':' of the address that follows `prefix` in the output (the
  // address ends at a space or a '/').
  int WaitForLinePort(const std::string& prefix, std::chrono::seconds timeout) {
    const auto end = Clock::now() + timeout;
    while (Clock::now() < end) {
      const std::string out = output();
      const size_t at = out.find(prefix);
      if (at != std::string::npos) {
        const size_t stop = out.find_first_of(" /\n", at + prefix.size());
        const size_t colon = out.rfind(':', stop);
        if (stop != std::string::npos && colon != std::string::npos && colon > at) {
          return std::atoi(out.substr(colon + 1, stop - colon - 1).c_str());
        }
      }
      if (WaitForExit(std::chrono::milliseconds(20)).has_value()) return 0;
    }
    return 0;
  }

  pid_t pid_ = -1;
  std::optional<int> exit_status_;
  std::thread reader_;
  std::mutex mu_;
  std::string output_;
};

// GET `path` from 127.0.0.1:port over plain HTTP/1.1; the whole response, or "" (bounded by a
// 5 s socket timeout).
inline std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  timeval tv{.tv_sec = 5, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request =
        "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size())) {
      char buffer[4096];
      for (ssize_t n; (n = recv(fd, buffer, sizeof(buffer), 0)) > 0;) {
        response.append(buffer, static_cast<size_t>(n));
      }
    }
  }
  close(fd);
  return response;
}

}  // namespace posenc::server::testing

#endif  // POSENC_TESTS_SERVER_SERVER_PROCESS_H_
