# [distributed-2gpu]: warm-up on one GPU against two ranks (one per GPU), same models, fresh
# caches; then the searched keys and cache entries of each. Run on a two-GPU machine:
#   MODES="single dist" TARGETS="kernelpro_backend.bench.warm_targets:gpt_block kernelpro_backend.bench.warm_targets:mlp" \
#   BUDGET=30 TRIALS=64 bash docs/gpu_runs/2026-11-26-distributed-warmup-h100x2-logs/gpu_distributed_warmup.sh
# (writes under $OUT: per mode and target a log, the shell wall time in walls.txt, the
# searched keys in keys-<mode>-<target>.txt, `cache ls` and the cache as a tarball). MODES may
# name one mode, so the two runs of a long warm-up can go in separate device calls; compare
# the keys files of both afterwards. BUDGET/TRIALS unset: the warm-up's defaults.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit
nvidia-smi -L; nproc
limits=()
[ -n "$BUDGET" ] && limits+=(--budget-s "$BUDGET")
[ -n "$TRIALS" ] && limits+=(--max-trials "$TRIALS")
for t in ${TARGETS:-kernelpro_backend.examples:transformer_block kernelpro_backend.examples:mlp}; do
  name=${t##*:}
  for m in ${MODES:-single dist}; do
    if [ "$m" = single ]; then env=(CUDA_VISIBLE_DEVICES=0); par=(); else env=(); par=(--nproc 2); fi
    s=$(date +%s); echo "$(date +%T.%N) shell: start" > $OUT/$m-$name.log
    env "${env[@]}" python -m kernelpro_backend.cli -v warmup "$t" "${limits[@]}" "${par[@]}" \
      --cache-dir $OUT/$m-$name >> $OUT/$m-$name.log 2>&1
    rc=$?; echo "$(date +%T.%N) shell: end rc=$rc" >> $OUT/$m-$name.log
    echo "$m $name rc=$rc $(( $(date +%s) - s )) s; $(grep -a 'subgraphs, ' $OUT/$m-$name.log | tail -1)" | tee -a $OUT/walls.txt
    ls $OUT/$m-$name/logs 2>/dev/null | sed 's/\.jsonl$//' | sort > $OUT/keys-$m-$name.txt
    KERNELPRO_CACHE_DIR=$OUT/$m-$name python -m kernelpro_backend.cli cache ls > $OUT/ls-$m-$name.txt 2>&1
    echo "  searched $(wc -l < $OUT/keys-$m-$name.txt) keys; $(tail -1 $OUT/ls-$m-$name.txt)"
    (cd $OUT && tar czf $m-$name.tgz $m-$name && rm -rf $m-$name)
  done
  [ -f $OUT/keys-single-$name.txt ] && [ -f $OUT/keys-dist-$name.txt ] && \
    { cmp -s $OUT/keys-single-$name.txt $OUT/keys-dist-$name.txt && echo "$name: same searched keys" || echo "$name: DIFFERENT searched keys"; }
done
cat $OUT/walls.txt
