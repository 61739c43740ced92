// Throw-away PEM certificates for the TLS tests, made once per process with the openssl CLI in a
// temporary directory that is removed at exit.
#ifndef POSENC_TESTS_COMMON_CERTIFICATES_H_
#define POSENC_TESTS_COMMON_CERTIFICATES_H_

#include <filesystem>
#include <string>

namespace posenc::testing {

// A directory of PEM files: ca.pem, server.{pem,key} (CN and SAN localhost, 127.0.0.1) and
// client.{pem,key} signed by ca; other_ca.pem and other_client.{pem,key} signed by it.
class Certificates {
 public:
  static const Certificates& Get();
  ~Certificates();
  // Whether the openssl CLI is on PATH (tests skip without it).
  static bool OpensslAvailable();

  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  std::filesystem::path Path(const std::string& name) const { return dir_ / name; }
  std::string Pem(const std::string& name) const;

 private:
  Certificates();

  std::filesystem::path dir_;
  bool ok_ = false;
  std::string error_;
};

}  // namespace posenc::testing

#endif  // POSENC_TESTS_COMMON_CERTIFICATES_H_
