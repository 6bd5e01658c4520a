cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag | tee $OUT/thp.txt
(while sleep 5; do echo "$(date +%T) $(grep AnonHugePages /proc/meminfo)"; done > $OUT/anonhuge.txt 2>&1 &)
source .device-thp/env.sh; export ZS_BUNDLE=.device-thp BENCH_LIMIT_S=80
AB_ORDER="base new base new" BENCH_MODELS=gpt2-759m timeout 200 bash bench/torch/device_ab.sh $OUT/gpt2 --accum=1 --rounds=1 --systems=ddp,delayed --moment_format=MOMENTS_FP32 > $OUT/ab-gpt2.log 2>&1
AB_ORDER="base new" BENCH_MODELS=llama-1.1b timeout 100 bash bench/torch/device_ab.sh $OUT/llama --accum=1 --rounds=1 --systems=ddp,delayed --moment_format=MOMENTS_INT8 > $OUT/ab-llama.log 2>&1
grep -h "==\|tokens/s" $OUT/ab-*.log | grep -v "set up" | cut -c1-70; sort -k3 -n $OUT/anonhuge.txt | tail -1
tar -czf $OUT/ab.tar.gz -C $OUT gpt2 llama ab-gpt2.log ab-llama.log thp.txt anonhuge.txt
