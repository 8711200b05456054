// Collective statistics in step reports: what the communicators measured since the last report,
// with nccl-tests' algbw/busbw, and their sequence numbers.
#ifndef RINGMASTER_TRAINER_WORKER_STEP_REPORT_H_
#define RINGMASTER_TRAINER_WORKER_STEP_REPORT_H_

#include "proto/ringmaster/v1/worker.pb.h"
#include "trainer/comm/communicator.h"

namespace ringmaster::trainer {

// Moves `comm`'s totals since the last call into `report` (one CollectiveStat per operation,
// group = comm.name()) and records its entered/completed sequence numbers.
void AddCollectiveStats(Communicator& comm, v1::ReportStepRequest* report);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_WORKER_STEP_REPORT_H_
