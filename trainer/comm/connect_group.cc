#include "trainer/comm/connect_group.h"

#include <vector>

#include "common/logging.h"
#include "common/status.h"
#include "trainer/comm/shm_communicator.h"

namespace ringmaster::trainer {

absl::StatusOr<std::unique_ptr<Communicator>> ConnectGroup(
    GlooNetwork& network, const std::string& name, int rank, int size, KeyValueStore* store,
    absl::Duration timeout, bool shared_memory, const std::string& node) {
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> gloo,
                   network.Connect(name, rank, size, store, timeout));
  if (!shared_memory || size == 1) return gloo;
  // Every member's machine and node, as a 64-bit FNV-1a hash in two int32 words (absl::Hash is
  // seeded per process, so it cannot be compared across processes).
  uint64_t mine = 1469598103934665603ULL;
  for (unsigned char c : NodeIdentity(node)) mine = (mine ^ c) * 1099511628211ULL;
  std::vector<uint64_t> all(static_cast<size_t>(size));
  uint64_t own = mine;
  RETURN_IF_ERROR(
      gloo->AllGather(Tensor{&own, 2, DType::kI32}, Tensor{all.data(), 2 * size, DType::kI32}));
  gloo->TakeTotals();  // setup traffic, not a training step's
  for (uint64_t other : all) {
    if (other != mine) return gloo;  // members on several machines or nodes: Gloo for all
  }
  ShmOptions options;
  options.timeout = timeout;
  RM_LOG(INFO) << "group " << name << ": collectives through shared memory (all " << size
               << " members on this machine" << (node.empty() ? std::string() : ", node " + node)
               << ")";
  return ConnectSharedMemory(name, rank, size, store, std::move(gloo), options);
}

}  // namespace ringmaster::trainer
