// A trainer engine file that includes the client's internals, the worker
// and the server (refused), and the client's public API (allowed).
#include "client/client.h"
#include "client/client_impl.h"
#include "client/c_api_handles.h"
#include "server/core/primaries.h"
#include "trainer/policy.h"
#include "worker/engine.h"
