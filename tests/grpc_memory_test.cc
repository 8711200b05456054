// Issue 34, point 5, against a real coordinator: eight concurrent ~60 MiB SubmitJob calls with a
// bogus token. With a 64 MiB receive limit the coordinator read all of them before its handler
// checked the token (1.05 GB peak RSS, 619 MB over TLS). Now each fails (RESOURCE_EXHAUSTED: over
// the 4 MiB receive limit; or UNAUTHENTICATED: refused on its headers over TLS), the coordinator's
// peak resident memory stays far below that, and it still answers an authenticated call.
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_contents.h"
#include "gtest/gtest.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/ringmaster/v1/coordinator.grpc.pb.h"
#include "tests/local_cluster.h"
#include "tests/test_pki.h"

namespace ringmaster::testing {
namespace {

constexpr char kUserToken[] = "user-token-0123456789abcdef";
constexpr char kAgentToken[] = "agent-token-0123456789abcdef";
constexpr int kCalls = 8;
constexpr size_t kRequestBytes = 60 << 20;
// Far below the 1.05 GB (plaintext) and 619 MB (TLS) the attack reached, and above what a
// coordinator needs at rest plus what it may read of each refused call before refusing it.
constexpr int64_t kPeakBoundBytes = 300 << 20;
// Under AddressSanitizer (tools/test's asan pass builds the coordinator with it too) freed memory
// sits in ASan's quarantine (256 MiB by default) and every allocation carries redzones, so the
// resident size says nothing about what the coordinator keeps: the bound is checked only in the
// other configurations; the refusals and the answer afterwards are checked in every one.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kMemoryIsMeasurable = false;
#else
constexpr bool kMemoryIsMeasurable = true;
#endif

// The coordinator's peak resident set (VmHWM), in bytes, or -1.
int64_t PeakResidentBytes(pid_t pid, const char* field = "VmHWM:") {
  auto status = ReadFileContents(absl::StrCat("/proc/", pid, "/status"));
  if (!status.ok()) return -1;
  for (absl::string_view line : absl::StrSplit(*status, '\n')) {
    if (!absl::ConsumePrefix(&line, field)) continue;
    absl::ConsumeSuffix(&line, "kB");
    int64_t kib;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib)) return kib * 1024;
  }
  return -1;
}

class GrpcMemoryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(TestTempDir() + "/grpc_memory");
    RunCommand({"mkdir", "-p", *dir_}, "").IgnoreError();
    std::ofstream(Path("tokens")) << kUserToken << " alice\n" << kAgentToken << " node agent\n";
    MakeCert(*dir_, "ca", "", "");
    MakeCert(*dir_, "server", "ca", "IP:127.0.0.1,DNS:localhost");
  }
  static std::string Path(const std::string& file) { return *dir_ + "/" + file; }

  // Starts a coordinator (TLS without client certificates, or plaintext) with the tokens file.
  void Start(bool tls) {
    std::vector<std::string> flags = {
        "--tokens=" + Path("tokens"),
        "--state=" + Path(::testing::UnitTest::GetInstance()->current_test_info()->name()) + ".db"};
    if (tls) {
      flags.push_back("--tls_cert=" + Path("server.pem"));
      flags.push_back("--tls_key=" + Path("server.key"));
    } else {
      flags.push_back("--insecure");
    }
    auto c = StartCoordinator(flags);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::make_unique<CoordinatorProcess>(std::move(*c));
    std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
    if (tls) {
      grpc::SslCredentialsOptions options;
      auto ca = ReadFileContents(Path("ca.pem"));
      ASSERT_TRUE(ca.ok()) << ca.status();
      options.pem_root_certs = *ca;
      credentials = grpc::SslCredentials(options);
    }
    channel_ = grpc::CreateChannel(coordinator_->address(), credentials);
  }

  // The attack: kCalls concurrent SubmitJob calls of kRequestBytes with a bogus token, sent from
  // one serialized buffer (its slices are shared, so this process holds it once). Returns each
  // call's status.
  std::vector<grpc::Status> Flood() {
    v1::SubmitJobRequest request;
    request.set_request_id(std::string(kRequestBytes, 'x'));
    std::string wire;
    EXPECT_TRUE(request.SerializeToString(&wire));
    request.Clear();
    grpc::Slice slice(wire.data(), wire.size());
    wire.clear();
    wire.shrink_to_fit();
    const grpc::ByteBuffer body(&slice, 1);

    grpc::GenericStub stub(channel_);
    grpc::CompletionQueue queue;
    struct Call {
      grpc::ClientContext context;
      grpc::ByteBuffer reply;
      grpc::Status status;
      std::unique_ptr<grpc::GenericClientAsyncResponseReader> reader;
    };
    std::vector<Call> calls(kCalls);
    for (int i = 0; i < kCalls; ++i) {
      Call& call = calls[i];
      call.context.AddMetadata("authorization", "Bearer not-a-token-of-this-cluster");
      call.context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(120)));
      call.reader = stub.PrepareUnaryCall(&call.context, "/ringmaster.v1.JobService/SubmitJob",
                                          body, &queue);
      call.reader->StartCall();
      call.reader->Finish(&call.reply, &call.status, reinterpret_cast<void*>(i));
    }
    for (int done = 0; done < kCalls; ++done) {  // Each call ends by its deadline at the latest.
      void* tag;
      bool ok;
      if (!queue.Next(&tag, &ok)) break;
    }
    queue.Shutdown();
    void* tag;
    bool ok;
    while (queue.Next(&tag, &ok)) {
    }
    std::vector<grpc::Status> statuses;
    for (Call& call : calls) statuses.push_back(call.status);
    return statuses;
  }

  void ExpectRefusedWithBoundedMemory() {
    const std::vector<grpc::Status> statuses = Flood();
    for (int i = 0; i < kCalls; ++i) {
      const grpc::StatusCode code = statuses[i].error_code();
      EXPECT_TRUE(code == grpc::StatusCode::RESOURCE_EXHAUSTED ||
                  code == grpc::StatusCode::UNAUTHENTICATED)
          << "call " << i << ": " << code << " " << statuses[i].error_message();
    }
    const int64_t peak = PeakResidentBytes(coordinator_->process.pid());
    ASSERT_GT(peak, 0);
    if (kMemoryIsMeasurable) {
      EXPECT_LT(peak, kPeakBoundBytes) << "coordinator peak RSS " << (peak >> 20) << " MiB";
    }
    std::cout << "coordinator peak RSS after the flood: " << (peak >> 20) << " MiB, RSS now "
              << (PeakResidentBytes(coordinator_->process.pid(), "VmRSS:") >> 20) << " MiB\n";

    // It still serves an authenticated caller.
    auto stub = v1::JobService::NewStub(channel_);
    grpc::ClientContext context;
    context.AddMetadata("authorization", absl::StrCat("Bearer ", kUserToken));
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    v1::ListJobsRequest list;
    v1::ListJobsResponse jobs;
    const grpc::Status listed = stub->ListJobs(&context, list, &jobs);
    EXPECT_TRUE(listed.ok()) << listed.error_code() << " " << listed.error_message();
    EXPECT_TRUE(coordinator_->process.Running()) << coordinator_->process.Log();
  }

  static std::string* dir_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
  std::shared_ptr<grpc::Channel> channel_;
};

std::string* GrpcMemoryTest::dir_ = nullptr;

TEST_F(GrpcMemoryTest, LargeUnauthenticatedRequestsOverPlaintext) {
  ASSERT_NO_FATAL_FAILURE(Start(/*tls=*/false));
  ExpectRefusedWithBoundedMemory();
}

TEST_F(GrpcMemoryTest, LargeUnauthenticatedRequestsOverTls) {
  ASSERT_NO_FATAL_FAILURE(Start(/*tls=*/true));
  ExpectRefusedWithBoundedMemory();
}

}  // namespace
}  // namespace ringmaster::testing
