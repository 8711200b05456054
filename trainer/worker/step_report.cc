#include "trainer/worker/step_report.h"

namespace ringmaster::trainer {

void AddCollectiveStats(Communicator& comm, v1::ReportStepRequest* report) {
  for (const OpTotals& t : comm.TakeTotals()) {
    v1::CollectiveStat* s = report->add_collectives();
    s->set_op(CollectiveOpName(t.op));
    s->set_group(comm.name());
    s->set_count(t.count);
    s->set_bytes(t.bytes);
    s->set_seconds(t.seconds);
    s->set_algbw_bytes_per_second(t.algbw());
    s->set_busbw_bytes_per_second(t.algbw() * BusBandwidthFactor(t.op, comm.size()));
  }
  (*report->mutable_collective_entered())[comm.name()] = comm.entered();
  (*report->mutable_collective_completed())[comm.name()] = comm.completed();
}

}  // namespace ringmaster::trainer
