# Sourced by the bench/step device scripts after device_server.sh (bin, srv,
# out): the 100.7M-parameter MLP (2048 -> 8192 -> 8192 -> 2048, micro-batch
# 64, AdamW) through each system. MLP_INPUT, MLP_HIDDEN ("8192, 8192"),
# MLP_OUTPUT, MLP_BATCH, MLP_STEPS and BACKEND (cuda) change it for a check
# on a machine without a GPU; MLP_EXTRA adds TrainConfig fields (e.g.
# "speculative_step: true"). TIMELINE=1 has each worker write its timeline
# to $out/timeline_NAME.jsonl (with SERVER_FLAGS=--timeline=FILE for the
# server's: python3 bench/step/timeline.py $out/timeline_NAME.jsonl FILE).
step_dir=${step_dir:-$(dirname "${BASH_SOURCE[0]}")}
metrics=$(sed -n 's/.*metrics on \([^ ]*\).*/\1/p' "$out/server.log")

# zs_mlp NAME WIRE [worker flags]: zerostate-worker on the MLP, job NAME,
# fp32 or bf16 gradients and weights on the wire; its log in $out/NAME.log
# and, when the server has a metrics port, the page after it in
# $out/metrics_NAME.txt.
zs_mlp() {
  local name=$1 wire=$2 dtypes=""
  shift 2
  [[ $wire == bf16 ]] && dtypes="grad_dtype: DTYPE_BF16 weight_dtype: DTYPE_BF16"
  cat > "$out/$name.textproto" <<CFG
train { job_id: "$name" model { input_dim: ${MLP_INPUT:-2048} hidden: [${MLP_HIDDEN:-8192, 8192}] output_dim: ${MLP_OUTPUT:-2048} }
        micro_batch_size: ${MLP_BATCH:-64} steps: ${MLP_STEPS:-12} block_elems: 262144 $dtypes
        ${MLP_EXTRA:-} }
CFG
  WORLD_SIZE=1 "${WORKER:-$bin/zerostate-worker}" --config="$out/$name.textproto" --servers="$srv" \
    --plaintext --metrics_port=0 --backend="${BACKEND:-cuda}" ${TIMELINE:+--timeline="$out/timeline_$name.jsonl"} \
    "$@" >"$out/$name.log" 2>&1
  local rc=$?
  if [[ -n $metrics ]]; then
    python3 -c "import urllib.request, sys; sys.stdout.write(urllib.request.urlopen('http://$metrics/metrics').read().decode())" \
      >"$out/metrics_$name.txt" 2>&1
  fi
  return $rc
}

# mlp_args: the MLP's shape for the PyTorch scripts (mlp_model.py).
mlp_args() {
  local hidden=${MLP_HIDDEN:-8192, 8192}
  echo "--input ${MLP_INPUT:-2048} --hidden ${hidden// /} --output ${MLP_OUTPUT:-2048} --batch ${MLP_BATCH:-64}"
}

# fsdp2_mlp WIRE: FSDP2 + CPUOffloadPolicy + fused CPU AdamW on the MLP
# (fsdp2_step.py; bf16: MixedPrecisionPolicy(param_dtype=bfloat16)), its
# figures in $out/fsdp2_WIRE.json.
fsdp2_mlp() {
  local flag=""
  [[ $1 == bf16 ]] && flag=--bf16
  PYTHONUNBUFFERED=1 python3 "$step_dir/fsdp2_step.py" $(mlp_args) $flag ${FSDP2_FLAGS:-} \
    >"$out/fsdp2_$1.json" 2>"$out/fsdp2_$1.err" || tail -n 5 "$out/fsdp2_$1.err"
}
