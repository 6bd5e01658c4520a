#!/usr/bin/env bash
# Starts this node's share of a bare-metal training run: one zerostate-worker
# per GPU, through the common launcher (torchrun's variables: RANK,
# LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK). Run it on every GPU
# node with that node's rank, e.g. on node 1 of 2:
#   NODE_RANK=1 deploy/systemd/train-node.sh
# torchrun works as well, with the same variables:
#   torchrun --nnodes=2 --nproc-per-node=8 --node-rank=1 --no-python \
#     zerostate-worker --config=/etc/zerostate/worker.textproto --backend=cuda
set -euo pipefail
: "${NODE_RANK:?set NODE_RANK to this node's index, 0..NNODES-1}"
NNODES=${NNODES:-2}
NPROC_PER_NODE=${NPROC_PER_NODE:-8}
CONFIG=${CONFIG:-/etc/zerostate/worker.textproto}
# The state servers in shard order (the config's cluster.servers, or this).
SERVERS=${SERVERS:-state-0.example.internal:7070,state-1.example.internal:7070}
# The job's token, the same on every node (e.g. openssl rand -hex 32, kept
# in a secret store); the workers read it from the environment only.
: "${ZEROSTATE_JOB_TOKEN:?set ZEROSTATE_JOB_TOKEN to the job's token, the same on every node}"
export ZEROSTATE_JOB_TOKEN
# This node's client certificate for the servers' mutual TLS.
TLS_DIR=${TLS_DIR:-/etc/zerostate/tls}
exec zerostate-launch --nnodes "$NNODES" --nproc-per-node "$NPROC_PER_NODE" \
  --node-rank "$NODE_RANK" -- \
  zerostate-worker --config="$CONFIG" --servers="$SERVERS" --backend=cuda \
  --tls_ca="$TLS_DIR/ca.pem" --tls_cert="$TLS_DIR/client.pem" --tls_key="$TLS_DIR/client.key"
