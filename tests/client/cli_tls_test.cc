// The posenc CLI's TLS flags (--tls, --tls-ca, --tls-cert, --tls-key) against TLS and mutual-TLS
// servers on 127.0.0.1:0, with throw-away certificates (tests/common/certificates.h).
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/common/certificates.h"

#ifndef POSENC_CLI_PATH
#error "POSENC_CLI_PATH must name the posenc binary (tests/CMakeLists.txt)"
#endif

namespace posenc::client {
namespace {

using ::posenc::testing::Certificates;

// Exit code and combined output of `posenc --server localhost:PORT <args> info`.
std::pair<int, std::string> Info(int port, const std::string& args) {
  const std::string command = absl::StrCat(POSENC_CLI_PATH, " --server localhost:", port,
                                           " --timeout 5s ", args, " info 2>&1");
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

class CliTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Certificates::OpensslAvailable()) {
      GTEST_SKIP() << "the openssl CLI is not installed (deploy/install-deps.sh installs it)";
    }
    ASSERT_TRUE(certs().ok()) << certs().error();
  }
  static const Certificates& certs() { return Certificates::Get(); }

  // `flag` followed by the path of the generated certificate file `name`.
  static std::string Flag(const std::string& flag, const std::string& name) {
    return absl::StrCat(flag, " ", certs().Path(name).string());
  }

  // Expects `info` with `args` against `port` to exit with `code`, its output holding `needle`.
  static void ExpectInfo(int port, const std::string& args, int code,
                         const std::string& needle = "") {
    const auto [actual, out] = Info(port, args);
    EXPECT_EQ(actual, code) << args << "\n" << out;
    EXPECT_NE(out.find(needle), std::string::npos) << out;
  }

  std::unique_ptr<server::PosencServer> Start(bool mutual) {
    server::ServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.tls_cert_file = certs().Path("server.pem").string();
    options.tls_key_file = certs().Path("server.key").string();
    if (mutual) options.tls_client_ca_file = certs().Path("ca.pem").string();
    auto server = server::PosencServer::Start(options);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? std::move(*server) : nullptr;
  }
};

TEST_F(CliTlsTest, TrustsTheServerThroughTlsCa) {
  auto server = Start(/*mutual=*/false);
  ASSERT_NE(server, nullptr);
  ExpectInfo(server->port(), Flag("--tls-ca", "ca.pem"), 0, "version");
  // Plaintext to a TLS server fails (UNAVAILABLE, exit 1); so does an untrusted certificate.
  ExpectInfo(server->port(), "", 1);
  ExpectInfo(server->port(), Flag("--tls-ca", "other_ca.pem"), 1);
  server->Shutdown(std::chrono::system_clock::now());
  server->Wait();
}

TEST_F(CliTlsTest, MutualTlsNeedsTheClientCertificate) {
  auto server = Start(/*mutual=*/true);
  ASSERT_NE(server, nullptr);
  const std::string ca = Flag("--tls-ca", "ca.pem");
  ExpectInfo(server->port(), ca, 1);
  ExpectInfo(
      server->port(),
      absl::StrCat(ca, " ", Flag("--tls-cert", "client.pem"), " ", Flag("--tls-key", "client.key")),
      0);
  server->Shutdown(std::chrono::system_clock::now());
  server->Wait();
}

TEST_F(CliTlsTest, BadTlsFlagsAreUsageErrors) {
  ExpectInfo(1, Flag("--tls-cert", "client.pem"), 2, "--tls-cert and --tls-key go together");
  ExpectInfo(1, "--tls-ca /nonexistent/ca.pem", 2, "--tls-ca: cannot read a PEM file");
}

}  // namespace
}  // namespace posenc::client
