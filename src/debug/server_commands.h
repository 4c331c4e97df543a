// What the debug server (debug_server.cpp) answers to each command of a
// client that proved it holds the job's token: one text, sent whole.
#pragma once

#include <string>

#include "crown/actor/proc.h"

namespace crown::debug {

/// The answer to `command` (ping, status, stacks, stacks native, pdb
/// list|read|send ...); throws crown::Error for a malformed pdb command.
std::string answerCommand(Proc& proc, const std::string& command);

}  // namespace crown::debug
