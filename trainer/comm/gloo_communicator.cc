#include "trainer/comm/gloo_communicator.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"

namespace ringmaster::trainer {
namespace {

// Slots of point-to-point messages: a range of their own, apart from Gloo's collective slots
// (prefix << 56) and Context::nextSlot() (small numbers).
constexpr uint64_t kPointToPointSlots = uint64_t{0x7e} << 56;

// Gloo's rendezvous store interface over ours; Gloo reports failures by exception.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(KeyValueStore* store, std::string prefix, absl::Duration timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    absl::Status s = store_->Set(prefix_ + key, std::string(data.begin(), data.end()));
    if (!s.ok()) throw gloo::IoException(s.ToString());
  }
  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::string> v = store_->Wait(prefix_ + key, timeout_);
    if (!v.ok()) throw gloo::IoException(v.status().ToString());
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, ToChrono(timeout_)); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    for (const std::string& key : keys) {
      absl::StatusOr<std::string> v =
          store_->Wait(prefix_ + key, absl::Milliseconds(timeout.count()));
      if (!v.ok()) throw gloo::IoException(v.status().ToString());
    }
  }

  static std::chrono::milliseconds ToChrono(absl::Duration d) {
    return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
  }

 private:
  KeyValueStore* const store_;
  const std::string prefix_;
  const absl::Duration timeout_;
};

// Runs a Gloo call, turning its exceptions into UNAVAILABLE (a lost peer, a broken connection,
// a timeout inside Gloo): a restart can fix them.
template <typename F>
absl::Status Guard(F&& f) {
  try {
    f();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("gloo: ", e.what()));
  }
}

// A Gloo context whose pairs reach only the ring neighbours (rank - 1 and rank + 1): each member
// publishes two addresses and reads two, where a full mesh publishes size - 1 and reads
// (size - 1)^2 (quadratic in the group through the coordinator's store).
class RingContext final : public gloo::Context {
 public:
  RingContext(int rank, int size) : gloo::Context(rank, size) {}

  int left() const { return (rank + size - 1) % size; }
  int right() const { return (rank + 1) % size; }

  // Publishes this member's pair addresses under "<rank>" ({for left, for right}, each as a
  // 4-byte length and the bytes) and connects to both neighbours. Throws as Gloo does.
  void Connect(gloo::rendezvous::Store& store, std::shared_ptr<gloo::transport::Device> device) {
    std::shared_ptr<gloo::transport::Context> transport = device->createContext(rank, size);
    transport->setTimeout(getTimeout());
    std::string published;
    for (int peer : {left(), right()}) {
      std::unique_ptr<gloo::transport::Pair>& pair = transport->getPair(peer);
      std::vector<char> bytes = (pair ? pair : transport->createPair(peer))->address().bytes();
      const uint32_t length = static_cast<uint32_t>(bytes.size());
      published.append(reinterpret_cast<const char*>(&length), sizeof(length));
      published.append(bytes.begin(), bytes.end());
    }
    store.set(std::to_string(rank), std::vector<char>(published.begin(), published.end()));
    // The left neighbour's address for its right (this member), the right one's for its left.
    // The lower-ranked neighbour first, as Gloo's full mesh connects by rank: a pair's side with
    // the lower port waits in connect() until its peer connects, and ports fall as they may, so
    // with the left neighbour first everywhere every member could be waiting on its left.
    std::pair<int, int> order[2] = {{left(), 1}, {right(), 0}};  // {peer, index in its record}
    if (order[0].first > order[1].first) std::swap(order[0], order[1]);
    for (int i = 0; i < (left() == right() ? 1 : 2); ++i) {  // size 2: one peer, one pair
      const auto [peer, index] = order[i];
      transport->getPair(peer)->connect(Entry(store.get(std::to_string(peer)), index));
    }
    device_ = std::move(device);
    transportContext_ = std::move(transport);
  }

 private:
  static std::vector<char> Entry(const std::vector<char>& published, int index) {
    size_t at = 0;
    for (int i = 0;; ++i) {
      uint32_t length = 0;
      if (at + sizeof(length) > published.size()) break;
      std::memcpy(&length, published.data() + at, sizeof(length));
      at += sizeof(length);
      if (at + length > published.size()) break;
      if (i == index)
        return std::vector<char>(published.begin() + at, published.begin() + at + length);
      at += length;
    }
    throw gloo::IoException("malformed ring address record");
  }
};

void SumFloats(void* c, const void* a, const void* b, size_t n) {
  float* out = static_cast<float*>(c);
  const float* x = static_cast<const float*>(a);
  const float* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
}

// `ring`: the context reaches only the ring neighbours, and every collective passes whole buffers
// around the ring (size - 1 hops: meant for small messages, such as the checkpoint's agreement).
class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::string name, int rank, int size, std::shared_ptr<gloo::Context> context,
                   bool ring, absl::Duration timeout)
      : Communicator(std::move(name), rank, size),
        context_(std::move(context)),
        ring_(ring),
        timeout_(StoreAdapter::ToChrono(timeout)) {}
  const char* transport() const override { return "gloo"; }

 protected:
  absl::Status DoAllReduce(Tensor data) override {
    if (size() == 1) return absl::OkStatus();
    if (ring_) return Guard([&] { RingAllReduce(data); });
    return Guard([&] {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data.f32(), static_cast<size_t>(data.size));
      opts.setReduceFunction(&SumFloats);
      opts.setTag(NextTag());
      opts.setTimeout(timeout_);
      gloo::allreduce(opts);
    });
  }

  // Ring reduce-scatter: in step s each rank sends its running sum of chunk (rank - 1 - s) to
  // the right and adds its own input to the chunk (rank - 2 - s) arriving from the left; after
  // size - 1 steps the chunk arriving is the rank's own, summed over every rank.
  absl::Status DoReduceScatter(Tensor input, Tensor output) override {
    const int n = size();
    const int64_t chunk = output.size;
    if (n == 1 || chunk == 0) {
      if (chunk > 0) std::memcpy(output.data, input.data, output.bytes());
      return absl::OkStatus();
    }
    const size_t chunk_bytes = output.bytes();
    scratch_.resize(static_cast<size_t>(2 * chunk));
    const float* in = input.f32();
    auto chunk_of = [&](int i) { return in + static_cast<int64_t>(((i % n) + n) % n) * chunk; };
    const int right = Right();
    const int left = Left();
    return Guard([&] {
      float* sums[2] = {scratch_.data(), scratch_.data() + chunk};
      // One unbound buffer per half: Gloo allows one pending operation per buffer, and each
      // step sends from one half while receiving into the other.
      std::unique_ptr<gloo::transport::UnboundBuffer> halves[2] = {
          context_->createUnboundBuffer(sums[0], chunk_bytes),
          context_->createUnboundBuffer(sums[1], chunk_bytes)};
      auto first = context_->createUnboundBuffer(const_cast<float*>(chunk_of(rank() - 1)),
                                                 chunk_bytes);
      const uint64_t slot = static_cast<uint64_t>(context_->nextSlot());
      for (int s = 0; s < n - 1; ++s) {
        const int r = s % 2;
        // Step 0 sends straight from the input; later steps send the previous step's sum.
        gloo::transport::UnboundBuffer* out = s == 0 ? first.get() : halves[1 - r].get();
        out->send(right, slot);
        halves[r]->recv(left, slot);
        if (!halves[r]->waitRecv(timeout_)) throw gloo::IoException("reduce_scatter recv aborted");
        if (!out->waitSend(timeout_)) throw gloo::IoException("reduce_scatter send aborted");
        const float* mine = chunk_of(rank() - 2 - s);
        for (int64_t i = 0; i < chunk; ++i) sums[r][i] += mine[i];
      }
      std::memcpy(output.data, sums[(n - 2) % 2], chunk_bytes);
    });
  }

  absl::Status DoAllGather(Tensor input, Tensor output) override {
    const size_t chunk_bytes = input.bytes();
    char* own = static_cast<char*>(output.data) + static_cast<size_t>(rank()) * chunk_bytes;
    if (input.data != own) std::memmove(own, input.data, chunk_bytes);
    if (size() == 1) return absl::OkStatus();
    if (ring_) return Guard([&] { RingAllGather(output, chunk_bytes); });
    return Guard([&] {
      gloo::AllgatherOptions opts(context_);
      // In place: Gloo reads this rank's contribution from its chunk of the output.
      opts.setOutput(static_cast<char*>(output.data), output.bytes());
      opts.setTag(NextTag());
      opts.setTimeout(timeout_);
      gloo::allgather(opts);
    });
  }

  absl::Status DoBroadcast(Tensor data, int root) override {
    if (size() == 1) return absl::OkStatus();
    if (ring_) return Guard([&] { RingBroadcast(data, root); });
    return Guard([&] {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(static_cast<char*>(data.data), data.bytes());
      opts.setRoot(root);
      opts.setTag(NextTag());
      opts.setTimeout(timeout_);
      gloo::broadcast(opts);
    });
  }

  absl::Status DoSend(Tensor data, int peer) override {
    RETURN_IF_ERROR(CheckReachable(peer));
    return Guard([&] {
      auto buffer = context_->createUnboundBuffer(data.data, data.bytes());
      buffer->send(peer, PointToPointSlot(rank(), peer, sent_[peer]++));
      if (!buffer->waitSend(timeout_)) throw gloo::IoException("send aborted");
    });
  }

  absl::Status DoRecv(Tensor data, int peer) override {
    RETURN_IF_ERROR(CheckReachable(peer));
    return Guard([&] {
      auto buffer = context_->createUnboundBuffer(data.data, data.bytes());
      buffer->recv(peer, PointToPointSlot(peer, rank(), received_[peer]++));
      if (!buffer->waitRecv(timeout_)) throw gloo::IoException("recv aborted");
    });
  }

  // Both transfers are posted before either is waited for: Gloo's TCP pairs send an unbound
  // buffer only once the peer has posted the matching receive, so two blocking sends towards
  // each other would wait forever.
  absl::Status DoExchange(Tensor send, Tensor recv, int peer) override {
    RETURN_IF_ERROR(CheckReachable(peer));
    return Guard([&] {
      auto out = context_->createUnboundBuffer(send.data, send.bytes());
      auto in = context_->createUnboundBuffer(recv.data, recv.bytes());
      out->send(peer, PointToPointSlot(rank(), peer, sent_[peer]++));
      in->recv(peer, PointToPointSlot(peer, rank(), received_[peer]++));
      if (!in->waitRecv(timeout_)) throw gloo::IoException("exchange recv aborted");
      if (!out->waitSend(timeout_)) throw gloo::IoException("exchange send aborted");
    });
  }

  absl::Status DoBarrier() override {
    if (size() == 1) return absl::OkStatus();
    if (ring_) {
      float token = 0;
      return Guard([&] { RingAllReduce(Tensor{&token, 1, DType::kF32}); });
    }
    return Guard([&] {
      gloo::BarrierOptions opts(context_);
      opts.setTag(NextTag());
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
    });
  }

 private:
  uint32_t NextTag() { return tag_++; }
  int Left() const { return (rank() + size() - 1) % size(); }
  int Right() const { return (rank() + 1) % size(); }

  absl::Status CheckReachable(int peer) const {
    if (!ring_ || peer == Left() || peer == Right()) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat("group ", name(), " is a ring: rank ", rank(),
                                                      " reaches only ranks ", Left(), " and ",
                                                      Right(), ", not ", peer));
  }

  // Sends `out` (null: nothing) to the right neighbour and receives `in` (null: nothing) from
  // the left one on `slot`, both posted before either is waited for.
  void RingShift(void* out, void* in, size_t bytes, uint64_t slot) {
    std::unique_ptr<gloo::transport::UnboundBuffer> sending, receiving;
    if (out != nullptr) {
      sending = context_->createUnboundBuffer(out, bytes);
      sending->send(Right(), slot);
    }
    if (in != nullptr) {
      receiving = context_->createUnboundBuffer(in, bytes);
      receiving->recv(Left(), slot);
      if (!receiving->waitRecv(timeout_)) throw gloo::IoException("ring recv aborted");
    }
    if (sending != nullptr && !sending->waitSend(timeout_)) {
      throw gloo::IoException("ring send aborted");
    }
  }

  // The root's data passes from each member to its right neighbour: size - 1 hops.
  void RingBroadcast(Tensor data, int root) {
    const uint64_t slot = static_cast<uint64_t>(context_->nextSlot());
    const int position = (rank() - root + size()) % size();
    if (position > 0) RingShift(nullptr, data.data, data.bytes(), slot);
    if (position < size() - 1) RingShift(data.data, nullptr, data.bytes(), slot);
  }

  // Rank 0's data goes right, each member adding its own, so the last member has the sum, which
  // it then broadcasts around the ring.
  void RingAllReduce(Tensor data) {
    const uint64_t slot = static_cast<uint64_t>(context_->nextSlot());
    if (rank() > 0) {
      scratch_.resize(static_cast<size_t>(data.size));
      RingShift(nullptr, scratch_.data(), data.bytes(), slot);
      SumFloats(data.data, data.data, scratch_.data(), static_cast<size_t>(data.size));
    }
    if (rank() < size() - 1) RingShift(data.data, nullptr, data.bytes(), slot);
    RingBroadcast(data, size() - 1);
  }

  // In step s each member sends chunk (rank - s) to the right and receives chunk (rank - s - 1)
  // from the left: after size - 1 steps every member has every chunk.
  void RingAllGather(Tensor output, size_t chunk_bytes) {
    const uint64_t slot = static_cast<uint64_t>(context_->nextSlot());
    char* base = static_cast<char*>(output.data);
    auto chunk = [&](int i) {
      return base + static_cast<size_t>((i % size() + size()) % size()) * chunk_bytes;
    };
    for (int s = 0; s < size() - 1; ++s) {
      RingShift(chunk(rank() - s), chunk(rank() - s - 1), chunk_bytes, slot);
    }
  }
  uint64_t PointToPointSlot(int from, int to, uint64_t n) const {
    return kPointToPointSlots |
           ((static_cast<uint64_t>(from) * static_cast<uint64_t>(size()) + to) << 32) |
           (n & 0xffffffffULL);
  }

  std::shared_ptr<gloo::Context> context_;
  const bool ring_;
  const std::chrono::milliseconds timeout_;
  uint32_t tag_ = 0;
  std::vector<float> scratch_;
  std::map<int, uint64_t> sent_, received_;
};

class GlooNetworkImpl final : public GlooNetwork {
 public:
  explicit GlooNetworkImpl(std::shared_ptr<gloo::transport::Device> device)
      : device_(std::move(device)) {}

  absl::StatusOr<std::unique_ptr<Communicator>> Connect(const std::string& name, int rank,
                                                        int size, KeyValueStore* store,
                                                        absl::Duration timeout) override {
    if (size < 1 || rank < 0 || rank >= size) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " of ", size, " is not a member of group ", name));
    }
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(StoreAdapter::ToChrono(timeout));
    if (size > 1) {
      StoreAdapter adapter(store, "gloo/" + name + "/", timeout);
      absl::Status s = Guard([&] { context->connectFullMesh(adapter, device_); });
      if (!s.ok()) return Annotate(s, absl::StrCat("connecting group ", name));
    }
    return std::unique_ptr<Communicator>(
        new GlooCommunicator(name, rank, size, std::move(context), /*ring=*/false, timeout));
  }

  absl::StatusOr<std::unique_ptr<Communicator>> ConnectRing(const std::string& name, int rank,
                                                            int size, KeyValueStore* store,
                                                            absl::Duration timeout) override {
    if (size < 1 || rank < 0 || rank >= size) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " of ", size, " is not a member of group ", name));
    }
    auto context = std::make_shared<RingContext>(rank, size);
    context->setTimeout(StoreAdapter::ToChrono(timeout));
    if (size > 1) {
      StoreAdapter adapter(store, "gloo/" + name + "/ring/", timeout);
      absl::Status s = Guard([&] { context->Connect(adapter, device_); });
      if (!s.ok()) return Annotate(s, absl::StrCat("connecting group ", name, " (ring)"));
    }
    return std::unique_ptr<Communicator>(
        new GlooCommunicator(name, rank, size, std::move(context), /*ring=*/true, timeout));
  }

 private:
  std::shared_ptr<gloo::transport::Device> device_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<GlooNetwork>> GlooNetwork::Create(const std::string& hostname) {
  std::shared_ptr<gloo::transport::Device> device;
  absl::Status s = Guard([&] {
    gloo::transport::tcp::attr attr;
    attr.hostname = hostname;
    device = gloo::transport::tcp::CreateDevice(attr);
  });
  if (!s.ok()) return Annotate(s, absl::StrCat("binding a Gloo endpoint on ", hostname));
  return std::shared_ptr<GlooNetwork>(new GlooNetworkImpl(std::move(device)));
}

}  // namespace ringmaster::trainer
