// Fixture of layers_test: the core knows the membership by its interface.
#pragma once
#include "server/membership/etcd_membership.h"
#include "server/membership/membership.h"
