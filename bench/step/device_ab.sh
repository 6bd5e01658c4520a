#!/usr/bin/env bash
# Interleaved A/B of the synchronous step's same-host options on the MLP
# of device_all.sh, with FSDP2 (same precision) in every round: one run
# of a mode is noisy on the H200 host (the same binaries gave 35.9 and
# 44.3 ms at bf16 in two device_all.sh runs back to back), so each round
# runs every mode once, in turn, and device_ab_summary.py reports each
# mode's median over the rounds, its ratio to FSDP2's median, and its
# paired ratio to the default in each round. Modes (MODES, default all):
#   default    shared staging, 8 streams per server (the defaults)
#   copied     --shared_staging=false: the client copies into and out of
#              the same-host plane's segments
#   streams4   --same_host_streams_per_server=0: 4 streams per server
#   delayed    --delayed_update_warmup=2 (the delayed update, as in
#              device_all.sh)
#   speculative  train.speculative_step (as in device_all.sh)
# A mode NAME_prev runs NAME's flags with bin/zerostate-worker-prev (a
# worker of an earlier commit, bundled under that name): an A/B of a
# worker change on the same server, in the same rounds.
# WIRES (default "bf16 fp32"), ROUNDS (default 4). Bundle as for
# device_all.sh; there: bash bench/step/device_ab.sh $OUT
set -uo pipefail
step_dir=$(dirname "$0")
export SERVER_THREADS=${SERVER_THREADS:-15} SERVER_METRICS=127.0.0.1:0
source "$step_dir/device_server.sh"  # out (from $1), bin, srv, the job token
source "$step_dir/device_mlp.sh"     # zs_mlp, fsdp2_mlp, mlp_args
git rev-parse HEAD >"$out/commit.txt" 2>/dev/null || true
declare -A flags=([default]="" [copied]="--shared_staging=false"
                  [streams4]="--same_host_streams_per_server=0"
                  [delayed]="--delayed_update_warmup=2" [speculative]="")
declare -A extras=([speculative]="speculative_step: true")
for round in $(seq 1 "${ROUNDS:-4}"); do
  for wire in ${WIRES:-bf16 fp32}; do
    for mode in ${MODES:-default copied streams4}; do
      base=${mode%_prev} worker=$bin/zerostate-worker
      [[ $mode == *_prev ]] && worker=$bin/zerostate-worker-prev
      # shellcheck disable=SC2086  # the flags are words
      WORKER=$worker MLP_EXTRA=${extras[$base]:-} zs_mlp "${mode}_${wire}_r$round" "$wire" \
        ${flags[$base]}
    done
    fsdp2_mlp "$wire"
    mv "$out/fsdp2_$wire.json" "$out/fsdp2_${wire}_r$round.json"
    mv "$out/fsdp2_$wire.err" "$out/fsdp2_${wire}_r$round.err"
  done
done
python3 "$step_dir/device_ab_summary.py" --out "$out" --batch "${MLP_BATCH:-64}" \
  --rounds "${ROUNDS:-4}" --modes "${MODES:-default copied streams4}" \
  --wires "${WIRES:-bf16 fp32}" | tee "$out/summary.json"
