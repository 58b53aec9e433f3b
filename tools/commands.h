// Subcommands of the `deepinfer` binary. Each lives in its own tools/cmd_<name>.cc and is listed
// in the table in tools/deepinfer_main.cc. A command receives the arguments after its name and
// returns the process exit code (0 ok, 1 runtime failure, 2 bad usage).
#ifndef DEEPINFER_TOOLS_COMMANDS_H_
#define DEEPINFER_TOOLS_COMMANDS_H_

namespace deepinfer::cli {

int RunVersion(int argc, char** argv);
int RunServe(int argc, char** argv);
int RunKvstore(int argc, char** argv);
int RunGenerate(int argc, char** argv);
int RunBench(int argc, char** argv);
int RunMakeTestModel(int argc, char** argv);
int RunScore(int argc, char** argv);
int RunSim(int argc, char** argv);
int RunPlan(int argc, char** argv);

}  // namespace deepinfer::cli

#endif  // DEEPINFER_TOOLS_COMMANDS_H_
