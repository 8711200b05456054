// A throwaway PKI for integration tests: certificates made with the openssl command line.
// Not thread-safe (runs openssl as child processes); errors fail the calling test.
#ifndef RINGMASTER_TESTS_TEST_PKI_H_
#define RINGMASTER_TESTS_TEST_PKI_H_

#include <string>

namespace ringmaster::testing {

// Makes `dir/name.key` and `dir/name.pem`: signed by `dir/ca.{pem,key}` with subjectAltName
// `san` (e.g. "IP:127.0.0.1,DNS:localhost"), or a self-signed CA when `ca` is empty. Adds a
// googletest failure when openssl fails.
void MakeCert(const std::string& dir, const std::string& name, const std::string& ca,
              const std::string& san);

}  // namespace ringmaster::testing

#endif  // RINGMASTER_TESTS_TEST_PKI_H_
