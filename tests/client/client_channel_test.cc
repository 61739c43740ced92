// The client's channel: retries of UNAVAILABLE across a server restart, round_robin over
// several servers (an address list target), and a Client destroyed as soon as its call answers.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "posenc/client.h"
#include "server/server.h"

namespace posenc::client {
namespace {

std::unique_ptr<server::PosencServer> StartServer(int port, const std::string& backend) {
  server::ServerOptions options;
  options.listen_address = absl::StrCat("127.0.0.1:", port);
  options.backend = backend;
  options.threads = 1;
  auto started = server::PosencServer::Start(options);
  EXPECT_TRUE(started.ok()) << started.status();
  return started.ok() ? *std::move(started) : nullptr;
}

// Calls made while the only server restarts succeed: UNAVAILABLE is retried (every RPC is
// idempotent) with backoff, and the channel reconnects quickly.
TEST(ClientChannelTest, CallsSurviveAServerRestart) {
  auto server = StartServer(0, "cpu");
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  ClientOptions options;
  options.max_attempts = 5;
  auto client = Client::Connect(absl::StrCat("127.0.0.1:", port), options);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->AlibiSlopes({.num_heads = 8}).ok());

  server->Shutdown(std::chrono::system_clock::now());
  server->Wait();
  server.reset();
  // Back 300 ms later, on the same port.
  std::thread restart([&server, port] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    server = StartServer(port, "cpu");
  });
  const auto during = (*client)->AlibiSlopes({.num_heads = 8});
  restart.join();
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(during.ok()) << during.status();
  EXPECT_TRUE((*client)->AlibiSlopes({.num_heads = 8}).ok());
}

// An address list with round_robin (the default policy) spreads calls over every server: one
// serves with the reference backend, the other with cpu, and GetServerInfo says which answered.
TEST(ClientChannelTest, RoundRobinOverTwoServers) {
  auto reference = StartServer(0, "reference");
  auto cpu = StartServer(0, "cpu");
  ASSERT_NE(reference, nullptr);
  ASSERT_NE(cpu, nullptr);
  auto client = Client::Connect(
      absl::StrCat("ipv4:127.0.0.1:", reference->port(), ",127.0.0.1:", cpu->port()), {});
  ASSERT_TRUE(client.ok()) << client.status();
  std::set<std::string> answered;
  for (int i = 0; i < 20; ++i) {
    const auto info = (*client)->GetServerInfo();
    ASSERT_TRUE(info.ok()) << info.status();
    answered.insert(info->backends.at(0).name);
  }
  EXPECT_EQ(answered, (std::set<std::string>{"cpu", "reference"}));
}

// A Client may go as soon as its call has answered: the call's ClientContext, which holds a
// reference to the channel, is gone by then, so the Client drops the channel's last reference on
// the caller's thread. When gRPC's callback thread dropped it instead (the context released after
// the answer), gRPC 1.51 shut its callback queue down from that queue's own thread and freed the
// queue twice: ASan's double free in grpc_cq_internal_unref, a `posenc` CLI that crashed or hung
// at exit. The queue is shared by the whole process, so this shows only where no server or other
// channel of this process holds it (ctest runs each test in a process of its own). The answers
// are errors (nothing listens on port 1), waited for by polling, so that the caller is on its way
// while gRPC's thread is still in the callback.
TEST(ClientChannelTest, AClientCanGoAsSoonAsItsCallAnswers) {
  ClientOptions options;
  options.max_attempts = 1;
  for (int i = 0; i < 200; ++i) {
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect("127.0.0.1:1", options);
    ASSERT_TRUE(client.ok()) << client.status();
    if (i % 2 == 0) {
      EXPECT_FALSE((*client)->AlibiSlopes({.num_heads = 4}).ok());
    } else {
      Future<Tensor> slopes = (*client)->AlibiSlopesAsync({.num_heads = 4});
      while (slopes.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      }
      EXPECT_FALSE(slopes.get().ok());
    }
  }
}

}  // namespace
}  // namespace posenc::client
