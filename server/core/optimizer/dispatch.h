// Internal to server/core/optimizer/: the kernel table of an ISA.
#pragma once

#include "common/cpu_features.h"
#include "server/core/optimizer/kernel_table.h"

namespace zerostate::server::kernels {

// REQUIRES (to call what it returns): the CPU supports `isa`.
const KernelTable& KernelsFor(Isa isa);

}  // namespace zerostate::server::kernels
