# [distributed-2gpu]: warm-up on one GPU against two ranks (one per GPU), same models, fresh
# caches; then the searched keys and cache entries of both. Run on a two-GPU machine:
#   BUDGET=4 TRIALS=4 bash scripts/gpu_distributed_warmup.sh   (writes under $OUT; longer
#   searches make the searches, which the ranks split, a larger share of the wall time)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD:$PWD/scripts || exit
nvidia-smi -L
for t in transformer_block mlp; do
  s=$(date +%s); CUDA_VISIBLE_DEVICES=0 python -m kernelpro_backend.cli warmup kernelpro_backend.examples:$t --budget-s ${BUDGET:-4} --max-trials ${TRIALS:-4} --cache-dir $OUT/single > $OUT/single-$t.log 2>&1; echo "single $t rc=$? $(( $(date +%s) - s )) s" | tee -a $OUT/walls.txt
  s=$(date +%s); python -m kernelpro_backend.cli warmup kernelpro_backend.examples:$t --budget-s ${BUDGET:-4} --max-trials ${TRIALS:-4} --cache-dir $OUT/dist --nproc 2 > $OUT/dist-$t.log 2>&1; echo "dist $t rc=$? $(( $(date +%s) - s )) s" | tee -a $OUT/walls.txt
done
python - <<'PY'
import os, json, pathlib
out = pathlib.Path(os.environ["OUT"])
res = {}
for d in ("single", "dist"):
    logs = sorted(p.stem for p in (out / d / "logs").glob("*.jsonl"))
    res[d] = {"searched": logs}
    print(d, "searched", len(logs))
print("same searched keys:", res["single"]["searched"] == res["dist"]["searched"])
print("only single:", sorted(set(res["single"]["searched"]) - set(res["dist"]["searched"])))
print("only dist:", sorted(set(res["dist"]["searched"]) - set(res["single"]["searched"])))
json.dump(res, open(out / "keys.json", "w"), indent=1)
PY
for d in single dist; do KERNELPRO_CACHE_DIR=$OUT/$d python -m kernelpro_backend.cli cache ls > $OUT/ls-$d.txt 2>&1; echo "$d: $(wc -l < $OUT/ls-$d.txt) ls lines"; done
tail -3 $OUT/dist-mlp.log; cd $OUT && tar czf caches.tgz single dist && rm -rf single dist
