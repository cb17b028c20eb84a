// reshard.hpp: the core of reshard (layouts, partitions, plans, in-memory conversion).
// Compile-time layouts (reshard/static_layout.hpp: reshard::static, Boost.Hana), file formats
// (reshard/io/), xtensor (reshard/ext/) and MPI (reshard/mpi/) are opt-in.
#pragma once

#include "reshard/box.hpp"
#include "reshard/check_plan.hpp"
#include "reshard/convert.hpp"
#include "reshard/error.hpp"
#include "reshard/layout.hpp"
#include "reshard/partition.hpp"
#include "reshard/placement.hpp"
#include "reshard/plan.hpp"
#include "reshard/rank_plan.hpp"
#include "reshard/version.hpp"
