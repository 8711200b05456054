// StreamOutbox's bookkeeping, with the gRPC calls replaced by recorders (the reactions are
// delivered by hand, as gRPC would deliver them).
#include "common/stream_outbox.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ringmaster {
namespace {

struct Recorder {
  std::vector<std::string> started;  // messages whose write was started
  std::vector<grpc::StatusCode> finished;
};

StreamOutbox<std::string> MakeOutbox(Recorder* r) {
  return StreamOutbox<std::string>(
      [r](const std::string* m) { r->started.push_back(*m); },
      [r](const grpc::Status& s) { r->finished.push_back(s.error_code()); });
}

TEST(StreamOutboxTest, WritesOneAtATimeInOrderThenFinishes) {
  Recorder r;
  auto outbox = MakeOutbox(&r);
  EXPECT_TRUE(outbox.Push("a"));
  EXPECT_TRUE(outbox.Push("b"));
  EXPECT_EQ(r.started, std::vector<std::string>{"a"});
  outbox.Finish(grpc::Status(grpc::StatusCode::ABORTED, "bye"));
  EXPECT_TRUE(r.finished.empty());  // writes still pending
  EXPECT_FALSE(outbox.Push("c"));   // finishing: refused
  outbox.WriteDone(true);
  EXPECT_EQ(r.started, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r.finished.empty());
  outbox.WriteDone(true);
  EXPECT_EQ(r.finished, std::vector<grpc::StatusCode>{grpc::StatusCode::ABORTED});
}

TEST(StreamOutboxTest, AFinishWaitingForAWriteThatFailsStillFinishes) {
  Recorder r;
  auto outbox = MakeOutbox(&r);
  ASSERT_TRUE(outbox.Push("a"));
  ASSERT_TRUE(outbox.Push("b"));
  outbox.Finish(grpc::Status::OK);  // the peer went away (OnReadDone(false)) with "a" in flight
  outbox.WriteDone(false);          // then "a"'s write fails
  EXPECT_EQ(r.started, std::vector<std::string>{"a"});  // "b" is not written to a broken stream
  EXPECT_EQ(r.finished, std::vector<grpc::StatusCode>{grpc::StatusCode::OK});
  outbox.Finish(grpc::Status::OK);  // once only
  EXPECT_EQ(r.finished.size(), 1u);
}

TEST(StreamOutboxTest, ALastMessageWhoseWriteFailsStillFinishes) {
  Recorder r;
  auto outbox = MakeOutbox(&r);
  ASSERT_TRUE(outbox.Push("goodbye", /*last=*/true));
  outbox.WriteDone(false);
  EXPECT_EQ(r.finished, std::vector<grpc::StatusCode>{grpc::StatusCode::OK});
}

TEST(StreamOutboxTest, AFailedWriteWithoutAFinishLeavesTheStreamOpen) {
  Recorder r;
  auto outbox = MakeOutbox(&r);
  ASSERT_TRUE(outbox.Push("a"));
  outbox.WriteDone(false);
  EXPECT_TRUE(r.finished.empty());  // the reactor finishes it when its read fails
  outbox.Finish(grpc::Status::OK);
  EXPECT_EQ(r.finished.size(), 1u);
}

TEST(StreamOutboxTest, NothingStartsAfterClose) {
  Recorder r;
  auto outbox = MakeOutbox(&r);
  outbox.Close();
  EXPECT_FALSE(outbox.Push("a"));
  outbox.Finish(grpc::Status::OK);
  EXPECT_TRUE(r.started.empty());
  EXPECT_TRUE(r.finished.empty());
}

}  // namespace
}  // namespace ringmaster
