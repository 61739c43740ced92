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
  const std::string ca = "--tls-ca " + certs().Path("ca.pem").string();
  auto [code, out] = Info(server->port(), ca);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("version"), std::string::npos) << out;
  // Plaintext to a TLS server fails (UNAVAILABLE, exit 1); so does an untrusted certificate.
  auto [plain_code, plain_out] = Info(server->port(), "");
  EXPECT_EQ(plain_code, 1) << plain_out;
  auto [other_code, other_out] =
      Info(server->port(), "--tls-ca " + certs().Path("other_ca.pem").string());
  EXPECT_EQ(other_code, 1) << other_out;
  server->Shutdown(std::chrono::system_clock::now());
  server->Wait();
}

TEST_F(CliTlsTest, MutualTlsNeedsTheClientCertificate) {
  auto server = Start(/*mutual=*/true);
  ASSERT_NE(server, nullptr);
  const std::string ca = "--tls-ca " + certs().Path("ca.pem").string();
  auto [no_cert_code, no_cert_out] = Info(server->port(), ca);
  EXPECT_EQ(no_cert_code, 1) << no_cert_out;
  auto [code, out] =
      Info(server->port(), ca + " --tls-cert " + certs().Path("client.pem").string() +
                               " --tls-key " + certs().Path("client.key").string());
  EXPECT_EQ(code, 0) << out;
  server->Shutdown(std::chrono::system_clock::now());
  server->Wait();
}

TEST_F(CliTlsTest, BadTlsFlagsAreUsageErrors) {
  auto [half_code, half_out] = Info(1, "--tls-cert " + certs().Path("client.pem").string());
  EXPECT_EQ(half_code, 2) << half_out;
  EXPECT_NE(half_out.find("--tls-cert and --tls-key go together"), std::string::npos) << half_out;
  auto [missing_code, missing_out] = Info(1, "--tls-ca /nonexistent/ca.pem");
  EXPECT_EQ(missing_code, 2) << missing_out;
  EXPECT_NE(missing_out.find("--tls-ca: cannot read a PEM file"), std::string::npos) << missing_out;
}

}  // namespace
}  // namespace posenc::client
