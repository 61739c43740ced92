#include "server/tls.h"

#include <grpcpp/security/server_credentials.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/common/file.h"
#include "kernels/common/status.h"

namespace posenc::server {

absl::StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path,
                                        const std::string& what) {
  absl::StatusOr<std::string> contents = kernels::ReadFileToString(path);
  if (!contents.ok()) {
    // "--tls_cert: /etc/posenc/server.pem: cannot open: No such file or directory": a bad flag.
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", contents.status().message()));
  }
  std::string pem = std::move(contents).value();
  // "-----BEGIN CERTIFICATE-----", "-----BEGIN PRIVATE KEY-----", "-----BEGIN EC PRIVATE KEY-----".
  const size_t begin = pem.find("-----BEGIN ");
  const size_t kind = begin == std::string::npos ? begin : pem.find(what, begin);
  if (kind == std::string::npos || pem.find("-----", kind) == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": \"", path, "\" holds no PEM \"", what, "\" block"));
  }
  return pem;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files) {
  const bool has_cert = !files.cert_file.empty();
  const bool has_key = !files.key_file.empty();
  if (!has_cert && !has_key) {
    if (!files.client_ca_file.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls_client_ca: \"", files.client_ca_file,
                       "\" given without --tls_cert and --tls_key (mTLS needs TLS)"));
    }
    return grpc::InsecureServerCredentials();
  }
  if (!has_key) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_key: missing; --tls_cert=\"", files.cert_file, "\" needs its private key file"));
  }
  if (!has_cert) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_cert: missing; --tls_key=\"", files.key_file, "\" needs its certificate file"));
  }
  POSENC_ASSIGN_OR_RETURN(std::string cert,
                          ReadPemFile("tls_cert", files.cert_file, "CERTIFICATE"));
  POSENC_ASSIGN_OR_RETURN(std::string key, ReadPemFile("tls_key", files.key_file, "PRIVATE KEY"));

  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  ssl.pem_key_cert_pairs.push_back({std::move(key), std::move(cert)});
  if (!files.client_ca_file.empty()) {
    POSENC_ASSIGN_OR_RETURN(ssl.pem_root_certs,
                            ReadPemFile("tls_client_ca", files.client_ca_file, "CERTIFICATE"));
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

}  // namespace posenc::server
