// Fixture of layers_test: replication may use the data plane's connections
// and the membership's interface, not the client library, the data plane's
// server side or etcd's membership.
#include "client/client.h"
#include "client/data_conn.h"
#include "server/dataplane/data_plane.h"
#include "server/membership/etcd_membership.h"
#include "server/membership/membership.h"
#include "zerostate/v1/replica.grpc.pb.h"
#include "zerostate/v1/state_service.grpc.pb.h"
