source .device-ab/env.sh; B=$PWD/.device-ab/new/bin; export ZEROSTATE_CLIENT_LIB=$B/libzerostate_client.so
(cd tests/python && ZEROSTATE_SERVER=$B/zerostate-server timeout 80 python3 engine_gpu_test.py) > $OUT/engine_gpu_test.log 2>&1; echo "gpu_test rc=$?"; tail -4 $OUT/engine_gpu_test.log
export ZS_BUNDLE=.device-ab BENCH_LIMIT_S=110
AB_ORDER="new base new base" BENCH_MODELS=gpt2-759m timeout 330 bash bench/torch/device_ab.sh $OUT/gpt2 --accum=1 --rounds=1 --systems=ddp,sync,delayed --moment_format=MOMENTS_FP32 > $OUT/ab-gpt2.log 2>&1
AB_ORDER="new base" BENCH_MODELS=llama-1.1b timeout 150 bash bench/torch/device_ab.sh $OUT/llama --accum=1 --rounds=1 --systems=ddp,delayed --moment_format=MOMENTS_INT8 > $OUT/ab-llama.log 2>&1
grep -h "==\|tokens/s" $OUT/ab-*.log | grep -v "set up"
python3 bench/torch/table.py $OUT/gpt2/*/*.json $OUT/llama/*/*.json 2>&1 | tail -30
tar -czf $OUT/ab.tar.gz -C $OUT gpt2 llama ab-gpt2.log ab-llama.log engine_gpu_test.log
