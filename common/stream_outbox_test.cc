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

// A reader that stalls: past the bound the stream is finished with the cut status after what is
// queued, and nothing more is queued; a last message still goes in.
TEST(StreamOutboxTest, ABoundedPushCutsAStalledReader) {
  Recorder r;
  auto outbox = MakeOutbox(&r);
  const grpc::Status cut(grpc::StatusCode::RESOURCE_EXHAUSTED, "behind");
  for (const char* m : {"a", "b", "c"}) EXPECT_TRUE(outbox.PushBounded(m, false, 3, cut));
  EXPECT_FALSE(outbox.PushBounded("d", false, 3, cut));  // "a" in flight, "b" and "c" wait
  EXPECT_FALSE(outbox.PushBounded("e", false, 3, cut));  // cut already
  EXPECT_TRUE(r.finished.empty());
  for (int i = 0; i < 3; ++i) outbox.WriteDone(true);
  EXPECT_EQ(r.started, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(r.finished, std::vector<grpc::StatusCode>{grpc::StatusCode::RESOURCE_EXHAUSTED});

  Recorder r2;
  auto other = MakeOutbox(&r2);
  for (const char* m : {"a", "b", "c"}) EXPECT_TRUE(other.PushBounded(m, false, 3, cut));
  EXPECT_TRUE(other.PushBounded("end", true, 3, cut));  // the last message is never cut
  for (int i = 0; i < 4; ++i) other.WriteDone(true);
  EXPECT_EQ(r2.finished, std::vector<grpc::StatusCode>{grpc::StatusCode::OK});
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
