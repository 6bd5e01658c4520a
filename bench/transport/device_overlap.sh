#!/usr/bin/env bash
# transport_bench's TCP rows on the device machine, the overlapped data
# plane sessions (a168f99) against the serial ones before them (8d6dcff)
# with the same client: the run recorded in
# bench/results/transport-2026-11-30/results.md ("Overlap per connection").
# Bundle first (the serial server built from 8d6dcff's
# server/dataplane/data_session.cc, renamed so both fit in one bundle):
#   ../shared/tools/device-bundle .device \
#     build-client/bench/transport/transport_bench \
#     build-client/server/zerostate-server /tmp/oldsrv/zerostate-server-serial
# (/tmp/oldsrv: that one file compiled with build-client's flags, put into a
# copy of libzerostate_server_lib.a with ar r, and linked as ninja links it)
#   strip .device/bin/*
# then, there: source .device/env.sh && bash bench/transport/device_overlap.sh $OUT
out=$1
source "$(dirname "$0")/device_common.sh"
run overlapped 125 --server_binary=.device/bin/zerostate-server --planes=tcp --servers=1,2,4 --reps=2
run serial 125 --server_binary=.device/bin/zerostate-server-serial --planes=tcp --servers=1,2,4 --reps=2
