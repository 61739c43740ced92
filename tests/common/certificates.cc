#include "tests/common/certificates.h"

#include <stdlib.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <system_error>

#include "gtest/gtest.h"
#include "kernels/common/file.h"

namespace posenc::testing {
namespace {

namespace fs = std::filesystem;

// The file's contents, or "" when it cannot be read.
std::string ReadFile(const fs::path& path) {
  return kernels::ReadFileToString(path.string()).value_or("");
}

// Runs `command` in `dir` (a shell line); false, with its output in the failure, on error.
::testing::AssertionResult Shell(const fs::path& dir, const std::string& command) {
  const fs::path log = dir / "openssl.log";
  const std::string line =
      "cd '" + dir.string() + "' && (" + command + ") > '" + log.string() + "' 2>&1";
  if (std::system(line.c_str()) != 0) {
    return ::testing::AssertionFailure() << command << "\n" << ReadFile(log);
  }
  return ::testing::AssertionSuccess();
}

}  // namespace

const Certificates& Certificates::Get() {
  static const Certificates certs;  // made once per process, removed at exit
  return certs;
}

Certificates::~Certificates() {
  std::error_code ignored;
  if (!dir_.empty()) fs::remove_all(dir_, ignored);
}

bool Certificates::OpensslAvailable() {
  return std::system("openssl version > /dev/null 2>&1") == 0;
}

std::string Certificates::Pem(const std::string& name) const { return ReadFile(Path(name)); }

Certificates::Certificates() {
  char tmpl[] = "/tmp/posenc_tls_test_XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    error_ = "mkdtemp failed";
    return;
  }
  dir_ = tmpl;
  // EC P-256 keys: fast to make, and spoken by gRPC's TLS.
  const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::string ca_ext =
      " -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign";
  std::ofstream(dir_ / "server.ext")
      << "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
         "extendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n";
  std::ofstream(dir_ / "client.ext")
      << "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
         "extendedKeyUsage=clientAuth\n";
  const std::string commands[] = {
      "openssl req -x509 " + key +
          " -keyout ca.key -out ca.pem -days 2 -subj '/CN=posenc test CA'" + ca_ext,
      "openssl req -x509 " + key +
          " -keyout other_ca.key -out other_ca.pem -days 2 -subj '/CN=unrelated CA'" + ca_ext,
      "openssl req " + key + " -keyout server.key -out server.csr -subj '/CN=localhost'",
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -set_serial 1001 -days 2 "
      "-extfile server.ext -out server.pem",
      "openssl req " + key + " -keyout client.key -out client.csr -subj '/CN=posenc client'",
      "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -set_serial 1002 -days 2 "
      "-extfile client.ext -out client.pem",
      "openssl req " + key + " -keyout other_client.key -out other_client.csr -subj '/CN=stranger'",
      "openssl x509 -req -in other_client.csr -CA other_ca.pem -CAkey other_ca.key "
      "-set_serial 1003 -days 2 -extfile client.ext -out other_client.pem",
  };
  for (const std::string& command : commands) {
    ::testing::AssertionResult result = Shell(dir_, command);
    if (!result) {
      error_ = result.message();
      return;
    }
  }
  ok_ = true;
}

}  // namespace posenc::testing
