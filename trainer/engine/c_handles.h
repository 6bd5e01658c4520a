// The trainer engine's C handles (zerostate_engine_c.h's opaque structs),
// for the C API files that use them (c_api.cc, c_api_in_flight.cc,
// c_api_gather_slot.cc). Not
// for trainers: they see only the opaque handles.
#pragma once

#include "trainer/engine/gather_slot.h"
#include "trainer/engine/in_flight.h"
#include "trainer/engine/pusher.h"

struct zs_pusher {
  zerostate::trainer::Pusher pusher;
};

struct zs_in_flight {
  zerostate::trainer::InFlightStep step;
};

struct zs_gather_slot {
  explicit zs_gather_slot(zerostate::Range range) : slot(range) {}
  zerostate::trainer::GatherSlot slot;
};
