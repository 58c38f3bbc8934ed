// A plan as one rank of a distributed run (runtime/dist.hpp) runs it.
#pragma once

#include "graph/pipeline.hpp"

namespace uvflow {

// Rank 0 runs every stage. Another rank leaves out the stages fed, directly or not, by a stage
// whose outputs exist on rank 0 only (StageSpec::output_on_root: mpi.reduce_grid), and what those
// feed. The stages kept keep their order; their links are renumbered.
Plan plan_for_rank(const Plan& plan, int rank);

}  // namespace uvflow
