#include "trainer/comm/testing.h"

#include <chrono>
#include <thread>

#include "trainer/comm/gloo_communicator.h"

namespace ringmaster::trainer::testing {
namespace {

thread_local double seconds_in_operations = 0;

class DelayedCommunicator final : public Communicator {
 public:
  DelayedCommunicator(std::unique_ptr<Communicator> inner, absl::Duration delay)
      : Communicator(inner->name(), inner->rank(), inner->size()),
        inner_(std::move(inner)),
        delay_(delay) {}
  const char* transport() const override { return inner_->transport(); }
  void Abandon() override { inner_->Abandon(); }

 protected:
  absl::Status DoAllReduce(Tensor data) override {
    return Slow([&] { return inner_->AllReduce(data); });
  }
  absl::Status DoReduceScatter(Tensor input, Tensor output) override {
    return Slow([&] { return inner_->ReduceScatter(input, output); });
  }
  absl::Status DoAllGather(Tensor input, Tensor output) override {
    return Slow([&] { return inner_->AllGather(input, output); });
  }
  absl::Status DoBroadcast(Tensor data, int root) override {
    return Slow([&] { return inner_->Broadcast(data, root); });
  }
  absl::Status DoSend(Tensor data, int peer) override {
    return Slow([&] { return inner_->Send(data, peer); });
  }
  absl::Status DoRecv(Tensor data, int peer) override {
    return Slow([&] { return inner_->Recv(data, peer); });
  }
  absl::Status DoExchange(Tensor send, Tensor recv, int peer) override {
    return Slow([&] { return inner_->Exchange(send, recv, peer); });
  }
  absl::Status DoBarrier() override {
    return Slow([&] { return inner_->Barrier(); });
  }

 private:
  template <typename F>
  absl::Status Slow(F&& body) {
    const auto start = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(absl::ToChronoNanoseconds(delay_));
    absl::Status status = body();
    seconds_in_operations +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return status;
  }

  std::unique_ptr<Communicator> inner_;
  const absl::Duration delay_;
};

}  // namespace

std::vector<absl::Status> RunRanks(int ranks, const std::function<absl::Status(int rank)>& body) {
  std::vector<absl::Status> results(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) threads.emplace_back([&, r] { results[r] = body(r); });
  for (std::thread& t : threads) t.join();
  return results;
}

absl::StatusOr<std::unique_ptr<Communicator>> ConnectLoopback(const std::string& name, int rank,
                                                              int size, KeyValueStore* store,
                                                              absl::Duration timeout, bool ring) {
  absl::StatusOr<std::shared_ptr<GlooNetwork>> network = GlooNetwork::Create("127.0.0.1");
  if (!network.ok()) return network.status();
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      ring ? (*network)->ConnectRing(name, rank, size, store, timeout)
           : (*network)->Connect(name, rank, size, store, timeout);
  if (!comm.ok()) return comm.status();
  // Gloo's connect returns on the connecting side before the accepting side has read the
  // handshake: a rank that returned at once and closed its group would fail its peer's connect
  // ("Connection closed by peer"). A barrier holds every rank until all have connected; it is
  // neither numbered nor counted in the totals (Communicator::Barrier).
  if (absl::Status s = (*comm)->Barrier(); !s.ok()) return s;
  return comm;
}

std::unique_ptr<Communicator> WithDelay(std::unique_ptr<Communicator> inner, absl::Duration delay) {
  return std::make_unique<DelayedCommunicator>(std::move(inner), delay);
}

double SecondsInDelayedOperations() { return seconds_in_operations; }

}  // namespace ringmaster::trainer::testing
