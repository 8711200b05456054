// A request to stop training at a step boundary, checkpointing first: SIGUSR1. The agent sends it
// when a job is drained off a node (StopWorkers.checkpoint_grace_seconds), and anyone may send it
// by hand (`kill -USR1`) as a preemption notice. The handler only sets a flag; the training loop
// reads it once per step and every rank agrees on the step to stop at (AnyRankAsks in
// parallel/parallel_groups.h), so the checkpoint is the same step on every rank.
//
// Before InstallStopRequestHandler() SIGUSR1 keeps its default action (the process ends at once):
// a rank that has not started training has nothing to save.
#ifndef RINGMASTER_TRAINER_STOP_REQUEST_H_
#define RINGMASTER_TRAINER_STOP_REQUEST_H_

namespace ringmaster::trainer {

// Makes SIGUSR1 set the flag instead of ending the process. Idempotent.
void InstallStopRequestHandler();
// Whether SIGUSR1 arrived since the handler was installed (or since ClearStopRequest).
bool StopRequested();
// Forgets an earlier request (tests).
void ClearStopRequest();

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_STOP_REQUEST_H_
