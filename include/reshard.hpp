// reshard.hpp: the core of reshard (layouts, plans, in-memory conversion, static layouts).
// File formats (reshard/io/), xtensor (reshard/ext/) and MPI (reshard/mpi/) are opt-in.
#pragma once

#include "reshard/box.hpp"
#include "reshard/convert.hpp"
#include "reshard/error.hpp"
#include "reshard/layout.hpp"
#include "reshard/placement.hpp"
#include "reshard/plan.hpp"
#include "reshard/rank_plan.hpp"
#include "reshard/version.hpp"
