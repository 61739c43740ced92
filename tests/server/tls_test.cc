// TLS and mutual TLS (--tls_cert, --tls_key, --tls_client_ca): throw-away certificates made with
// the openssl CLI, a server on 127.0.0.1:0, and raw gRPC stubs (plus one posenc::client case).
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/credentials.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <system_error>

#include "gtest/gtest.h"
#include "posenc/client.h"
#include "posenc/v1/posenc.grpc.pb.h"
#include "server/server.h"
#include "tests/common/certificates.h"
#include "tests/server/server_test_util.h"

namespace posenc::server {
namespace {

namespace fs = std::filesystem;

using ::posenc::testing::Certificates;

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("openssl version > /dev/null 2>&1") != 0) {
      GTEST_SKIP() << "the openssl CLI is not installed (deploy/install-deps.sh installs it)";
    }
    ASSERT_TRUE(certs().ok()) << certs().error();
  }

  static const Certificates& certs() { return Certificates::Get(); }

  // A TLS server (mTLS when `client_ca`) on 127.0.0.1:0.
  std::unique_ptr<PosencServer> StartTls(bool client_ca) {
    ServerOptions options = testing::LocalServerOptions("reference");
    options.tls_cert_file = certs().Path("server.pem").string();
    options.tls_key_file = certs().Path("server.key").string();
    if (client_ca) options.tls_client_ca_file = certs().Path("ca.pem").string();
    auto server = PosencServer::Start(options);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? std::move(server).value() : nullptr;
  }

  // GetServerInfo over a fresh channel to localhost:port.
  static grpc::Status Info(int port, const std::shared_ptr<grpc::ChannelCredentials>& creds) {
    grpc::ChannelArguments args;
    // A fresh connection per call (no subchannel shared between the channels of one test).
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto channel = grpc::CreateCustomChannel("localhost:" + std::to_string(port), creds, args);
    auto stub = v1::PositionEncoding::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::GetServerInfoRequest request;
    v1::GetServerInfoResponse response;
    grpc::Status status = stub->GetServerInfo(&context, request, &response);
    if (status.ok()) {
      EXPECT_FALSE(response.version().empty());
    }
    return status;
  }

  std::shared_ptr<grpc::ChannelCredentials> Tls(const std::string& client = "") const {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = certs().Pem("ca.pem");
    if (!client.empty()) {
      ssl.pem_private_key = certs().Pem(client + ".key");
      ssl.pem_cert_chain = certs().Pem(client + ".pem");
    }
    return grpc::SslCredentials(ssl);
  }
};

TEST_F(TlsTest, TlsClientTrustingTheCaSucceeds) {
  auto server = StartTls(/*client_ca=*/false);
  ASSERT_NE(server, nullptr);
  grpc::Status status = Info(server->port(), Tls());
  EXPECT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
}

TEST_F(TlsTest, PlaintextClientFails) {
  auto server = StartTls(/*client_ca=*/false);
  ASSERT_NE(server, nullptr);
  grpc::Status status = Info(server->port(), grpc::InsecureChannelCredentials());
  EXPECT_FALSE(status.ok());
}

TEST_F(TlsTest, ClientNotTrustingTheServerFails) {
  auto server = StartTls(/*client_ca=*/false);
  ASSERT_NE(server, nullptr);
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = certs().Pem("other_ca.pem");
  grpc::Status status = Info(server->port(), grpc::SslCredentials(ssl));
  EXPECT_FALSE(status.ok());
}

TEST_F(TlsTest, MutualTlsNeedsAClientCertificateFromTheCa) {
  auto server = StartTls(/*client_ca=*/true);
  ASSERT_NE(server, nullptr);
  grpc::Status none = Info(server->port(), Tls());
  EXPECT_FALSE(none.ok()) << "a client without a certificate got through";
  grpc::Status wrong = Info(server->port(), Tls("other_client"));
  EXPECT_FALSE(wrong.ok()) << "a client certificate from an unrelated CA got through";
  grpc::Status plain = Info(server->port(), grpc::InsecureChannelCredentials());
  EXPECT_FALSE(plain.ok());
  grpc::Status right = Info(server->port(), Tls("client"));
  EXPECT_TRUE(right.ok()) << right.error_code() << ": " << right.error_message();
}

TEST_F(TlsTest, ClientLibraryTlsOptionsWorkWithMutualTls) {
  auto server = StartTls(/*client_ca=*/true);
  ASSERT_NE(server, nullptr);
  client::ClientOptions options;
  options.timeout = std::chrono::seconds(10);
  options.max_attempts = 1;
  options.use_tls = true;
  options.tls_root_certs = certs().Pem("ca.pem");
  options.tls_client_key = certs().Pem("client.key");
  options.tls_client_cert = certs().Pem("client.pem");
  auto client = client::Client::Connect("localhost:" + std::to_string(server->port()), options);
  ASSERT_TRUE(client.ok()) << client.status();
  auto info = (*client)->GetServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_FALSE(info->version.empty());

  options.tls_client_key.clear();
  options.tls_client_cert.clear();
  auto anonymous = client::Client::Connect("localhost:" + std::to_string(server->port()), options);
  ASSERT_TRUE(anonymous.ok()) << anonymous.status();
  EXPECT_FALSE((*anonymous)->GetServerInfo().ok());
}

// Start() refuses bad TLS options with INVALID_ARGUMENT naming the flag and the file.
absl::Status StartStatus(const std::string& cert, const std::string& key,
                         const std::string& client_ca) {
  ServerOptions options = testing::LocalServerOptions("reference");
  options.tls_cert_file = cert;
  options.tls_key_file = key;
  options.tls_client_ca_file = client_ca;
  return PosencServer::Start(options).status();
}

TEST_F(TlsTest, BadOptionsFailStartNamingFlagAndFile) {
  const std::string cert = certs().Path("server.pem").string();
  const std::string key = certs().Path("server.key").string();
  const std::string ca = certs().Path("ca.pem").string();
  const std::string missing = certs().Path("no-such-file.pem").string();
  struct Case {
    std::string cert, key, client_ca, flag, file;
  };
  const Case cases[] = {
      {cert, "", "", "--tls_key", cert},         {"", key, "", "--tls_cert", key},
      {"", "", ca, "--tls_client_ca", ca},       {missing, key, "", "--tls_cert", missing},
      {cert, missing, "", "--tls_key", missing}, {cert, key, missing, "--tls_client_ca", missing},
      {key, key, "", "--tls_cert", key},  // a key where the certificate belongs
      {cert, cert, "", "--tls_key", cert},       {cert, key, key, "--tls_client_ca", key},
  };
  for (const Case& c : cases) {
    const absl::Status status = StartStatus(c.cert, c.key, c.client_ca);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find(c.flag), absl::string_view::npos) << status;
    EXPECT_NE(status.message().find(c.file), absl::string_view::npos) << status;
  }
}

}  // namespace
}  // namespace posenc::server
