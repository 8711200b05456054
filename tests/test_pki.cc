#include "tests/test_pki.h"

#include <fstream>
#include <vector>

#include "common/testing/subprocess.h"
#include "gtest/gtest.h"

namespace ringmaster::testing {
namespace {

// Runs openssl; fails the test on error.
void OpenSsl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = RunCommand(argv, "");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << r->output;
}

}  // namespace

void MakeCert(const std::string& dir, const std::string& name, const std::string& ca,
              const std::string& san) {
  std::string key = dir + "/" + name + ".key", pem = dir + "/" + name + ".pem";
  if (ca.empty()) {
    OpenSsl({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", key, "-out", pem, "-days", "2", "-subj", "/CN=" + name});
    return;
  }
  std::string csr = dir + "/" + name + ".csr", ext = dir + "/" + name + ".ext";
  std::ofstream(ext) << "subjectAltName=" << san << "\n";
  OpenSsl({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
           key, "-out", csr, "-subj", "/CN=" + name});
  OpenSsl({"x509", "-req", "-in", csr, "-CA", dir + "/" + ca + ".pem", "-CAkey",
           dir + "/" + ca + ".key", "-CAcreateserial", "-out", pem, "-days", "2", "-extfile", ext});
}

}  // namespace ringmaster::testing
