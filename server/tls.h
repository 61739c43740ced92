// Server transport credentials: plaintext, TLS, or mutual TLS, from the PEM files named in
// ServerOptions (--tls_cert, --tls_key, --tls_client_ca).
//
// Thread-safety: pure functions (they read files).
#ifndef POSENC_SERVER_TLS_H_
#define POSENC_SERVER_TLS_H_

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace posenc::server {

struct TlsFiles {
  std::string cert_file;       // --tls_cert: the server's certificate chain (PEM)
  std::string key_file;        // --tls_key: its private key (PEM)
  std::string client_ca_file;  // --tls_client_ca: CA(s) client certificates must chain to (PEM)
};

// No files: insecure (plaintext) credentials. Cert and key: TLS. Cert, key and client CA: TLS
// that requires and verifies a client certificate (mTLS). INVALID_ARGUMENT, naming the flag and
// the file, when only one of cert/key is given, a client CA comes without them, or a file cannot
// be read or holds no PEM block of the expected kind.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files);

// The text of a PEM file, checked to hold a "-----BEGIN <what>" block (what = "CERTIFICATE" or
// "PRIVATE KEY", which also matches "RSA PRIVATE KEY" / "EC PRIVATE KEY"). `flag` names the
// option in error messages.
absl::StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path,
                                        const std::string& what);

}  // namespace posenc::server

#endif  // POSENC_SERVER_TLS_H_
