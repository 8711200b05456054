// cuBLAS(Lt) are opened by the first call into them, not at process start, and the calls reach
// the real libraries. Needs no GPU: the status-name functions work without a device.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace {

bool Mapped(const std::string& library) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find(library) != std::string::npos;
}

TEST(CublasLoaderTest, LibrariesAreOpenedByTheFirstCallAndAnswerIt) {
  // The binary's only test: nothing has called into cuBLAS yet.
  EXPECT_FALSE(Mapped("libcublasLt.so"));
  EXPECT_FALSE(Mapped("libcublas.so"));
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
  EXPECT_TRUE(Mapped("libcublasLt.so"));
  EXPECT_TRUE(Mapped("libcublas.so"));
  // The real library's text, not the loader's error text.
  EXPECT_NE(std::string(cublasGetStatusString(CUBLAS_STATUS_ALLOC_FAILED)).find("alloc"),
            std::string::npos)
      << cublasGetStatusString(CUBLAS_STATUS_ALLOC_FAILED);
  // cuBLASLt answers too (a host-side object: no GPU needed).
  cublasLtMatmulPreference_t pref = nullptr;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulPreferenceDestroy(pref), CUBLAS_STATUS_SUCCESS);
}

}  // namespace
