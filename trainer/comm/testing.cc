#include "trainer/comm/testing.h"

#include <thread>

#include "trainer/comm/gloo_communicator.h"

namespace ringmaster::trainer::testing {

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
  if (ring) return (*network)->ConnectRing(name, rank, size, store, timeout);
  return (*network)->Connect(name, rank, size, store, timeout);
}

}  // namespace ringmaster::trainer::testing
