// A trainer header that reaches up into the client and the worker: refused.
#include "client/client.h"
#include "trainer/step_policy.h"
#include "worker/engine.h"
