// A command job written the way PyTorch programs are launched today: `torchrun
// --nproc_per_node=8 train.py --lr 3e-4`, or `python3 -m torch.distributed.run ... train.py`.
// Ringmaster is the launcher there: the agent starts one process per device itself, with
// torchrun's environment (agent/worker_env.h), so it runs the program torchrun would start
// (`PYTHON train.py --lr 3e-4`, `PYTHON -m pkg.train`, or with --no_python the program itself),
// which the Python watch then sees. Run as written, each rank's torchrun would make a world of
// its own (its defaults: one node, 127.0.0.1:29500), and train apart from the others.
//
// torchrun's options (torch 1.13 to 2.6, either spelling, `--opt=value` or `--opt value`, and a
// unique prefix, as argparse reads them): the two that shape the world must agree with the job
// (the coordinator refuses one that does not): --nproc_per_node (an integer equal to
// devices_per_node, or gpu, cpu, auto) and --nnodes (nodes, or MIN:MAX equal to min_nodes:nodes,
// min_nodes 0 reading as nodes); -m/--module, --no_python and --run_path say how the program
// runs (--run_path first: the script, in Python); the options are those of torch 1.13 to 2.6
// together (a later version's spelling is read for an earlier one's); the others (rendezvous,
// master, node rank, restarts, monitor interval, start method, role, logs, redirects, tee, local
// address, local ranks filter) are torchrun's own and give way to Ringmaster's (its rendezvous,
// restart policy and logs). `python -m torch.distributed.launch` (torchrun's deprecated form, which
// passes --local_rank to the program) is refused.
//
// Threading: pure functions, thread-safe. Ownership: nothing is kept. Errors: a command that
// cannot be read is a list of (field, rule) problems in FieldError's form, the field being
// "trainer.command[I]".
#ifndef RINGMASTER_SPEC_TORCHRUN_H_
#define RINGMASTER_SPEC_TORCHRUN_H_

#include <string>
#include <utility>
#include <vector>

namespace ringmaster::spec {

struct TorchrunCommand {
  // The interpreter of the `python -m torch.distributed.run` form ({"/venv/bin/python"}: not its
  // options, which torchrun does not give the program it starts); empty for `torchrun`, whose
  // #! line names it.
  std::vector<std::string> interpreter;
  enum class Kind { kScript, kModule, kNoPython };
  Kind kind = Kind::kScript;
  // What torchrun would run, then its arguments: the script (kScript), the module (kModule),
  // the program (kNoPython).
  std::vector<std::string> program;
  // The options' values as written ("" where absent), and the argv index where each was given.
  std::string nproc_per_node;
  int nproc_per_node_index = -1;
  std::string nnodes;
  int nnodes_index = -1;
};

// Whether `argv` runs torchrun: argv[0]'s last path component is "torchrun", or argv[0] is a
// Python interpreter whose options are followed by `-m torch.distributed.run` (or
// `torch.distributed.launch`, which ReadTorchrun refuses).
bool RunsTorchrun(const std::vector<std::string>& argv);

// The index of a word of `argv` that starts torchrun (torchrun, or a Python running
// torch.distributed.run) inside something else: env, a wrapper (`nohup`, `timeout 1h`, `numactl
// -N 0`, ...) or a shell's -c string (`bash -c "cd /data && torchrun ..."`), as
// spec/command_line.h's CommandRunning finds it, where Ringmaster would run torchrun itself and
// each rank would make a world of its own: the coordinator refuses it. -1 where none shows
// (argv itself runs torchrun, which Ringmaster reads; a shell script's contents are not read).
int HiddenTorchrun(const std::vector<std::string>& argv);

// Reads a command RunsTorchrun accepts (another is a problem). On success `problems` is empty; else
// `problems` says why, and `out` is unspecified.
using Problem = std::pair<std::string, std::string>;  // (field, rule)
void ReadTorchrun(const std::vector<std::string>& argv, TorchrunCommand* out,
                  std::vector<Problem>* problems);

// The job's own problems with a command ReadTorchrun read: --nproc_per_node and --nnodes
// against devices_per_node, nodes and min_nodes (0: nodes).
std::vector<Problem> TorchrunWorldProblems(const TorchrunCommand& command, int nodes, int min_nodes,
                                           int devices_per_node);

// The argv the agent runs for `command`, as torchrun starts its program: `PYTHON -u SCRIPT ARGS`,
// `PYTHON -u -m MODULE ARGS`, or with --no_python `PROGRAM ARGS`. PYTHON is `command.interpreter`,
// else `python` (the Python of torchrun's #! line: {"/usr/bin/python3.11"}, {"/usr/bin/env",
// "python3"}).
std::vector<std::string> TorchrunProgramArgv(const TorchrunCommand& command,
                                             const std::vector<std::string>& python);

}  // namespace ringmaster::spec

#endif  // RINGMASTER_SPEC_TORCHRUN_H_
