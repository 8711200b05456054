#include "trainer/comm/gloo_communicator.h"

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

void SumFloats(void* c, const void* a, const void* b, size_t n) {
  float* out = static_cast<float*>(c);
  const float* x = static_cast<const float*>(a);
  const float* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::string name, int rank, int size,
                   std::shared_ptr<gloo::rendezvous::Context> context, absl::Duration timeout)
      : Communicator(std::move(name), rank, size),
        context_(std::move(context)),
        timeout_(StoreAdapter::ToChrono(timeout)) {}
  const char* transport() const override { return "gloo"; }

 protected:
  absl::Status DoAllReduce(Tensor data) override {
    if (size() == 1) return absl::OkStatus();
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
    const int right = (rank() + 1) % n;
    const int left = (rank() + n - 1) % n;
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
    return Guard([&] {
      auto buffer = context_->createUnboundBuffer(data.data, data.bytes());
      buffer->send(peer, PointToPointSlot(rank(), peer, sent_[peer]++));
      if (!buffer->waitSend(timeout_)) throw gloo::IoException("send aborted");
    });
  }

  absl::Status DoRecv(Tensor data, int peer) override {
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
    return Guard([&] {
      gloo::BarrierOptions opts(context_);
      opts.setTag(NextTag());
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
    });
  }

 private:
  uint32_t NextTag() { return tag_++; }
  uint64_t PointToPointSlot(int from, int to, uint64_t n) const {
    return kPointToPointSlots | (static_cast<uint64_t>(from * size() + to) << 32) |
           (n & 0xffffffffULL);
  }

  std::shared_ptr<gloo::rendezvous::Context> context_;
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
        new GlooCommunicator(name, rank, size, std::move(context), timeout));
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
