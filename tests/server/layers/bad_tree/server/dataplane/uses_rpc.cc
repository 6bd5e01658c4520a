// Fixture of layers_test: one edge may not include the other.
#include "server/rpc/chunk_reactors.h"
#include "server/dataplane/data_session.h"
