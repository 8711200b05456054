// For tests: a backend whose operations all succeed at once without moving data. A test
// overrides the operations it watches.
#ifndef RINGMASTER_TRAINER_COMM_NO_OP_COMMUNICATOR_H_
#define RINGMASTER_TRAINER_COMM_NO_OP_COMMUNICATOR_H_

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "trainer/comm/communicator.h"

namespace ringmaster::trainer::testing {

class NoOpCommunicator : public Communicator {
 public:
  NoOpCommunicator(std::string name, int rank, int size)
      : Communicator(std::move(name), rank, size) {}
  const char* transport() const override { return "fake"; }

 protected:
  absl::Status DoAllReduce(Tensor) override { return absl::OkStatus(); }
  absl::Status DoReduceScatter(Tensor, Tensor) override { return absl::OkStatus(); }
  absl::Status DoAllGather(Tensor, Tensor) override { return absl::OkStatus(); }
  absl::Status DoBroadcast(Tensor, int) override { return absl::OkStatus(); }
  absl::Status DoSend(Tensor, int) override { return absl::OkStatus(); }
  absl::Status DoRecv(Tensor, int) override { return absl::OkStatus(); }
  absl::Status DoExchange(Tensor, Tensor, int) override { return absl::OkStatus(); }
  absl::Status DoBarrier() override { return absl::OkStatus(); }
};

}  // namespace ringmaster::trainer::testing

#endif  // RINGMASTER_TRAINER_COMM_NO_OP_COMMUNICATOR_H_
