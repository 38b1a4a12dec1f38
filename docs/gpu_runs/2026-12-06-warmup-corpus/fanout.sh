#!/bin/bash
# probe.py for several corpus models at once, one process a GPU (a multi-GPU machine), each
# into its own cache; then their rows merged into $OUT/real-models.json in issue 57's form
# ({model: {eager_ms, inductor_ms, kernelpro_ms, inductor_peak_mib, kernelpro_peak_mib,
# warmup_s}}) with a table and the geomean over Inductor.
#
#   MODELS="hf_bert hf_t5 hf_swin" D=240 T=580 OUT=/tmp/out bash docs/gpu_runs/2026-12-06-warmup-corpus/fanout.sh
#
# D: each warm-up's deadline (s); T: each probe's wall limit (s). With more models than GPUs
# the models run in waves of one a GPU.
here=$(cd "$(dirname "$0")" && pwd)
gpus=$(nvidia-smi -L | wc -l)
[ "$gpus" -ge 1 ] || { echo "fanout: no GPU"; exit 2; }
i=0
for m in $MODELS; do
  mkdir -p "$OUT/$m"
  (CUDA_VISIBLE_DEVICES=$((i % gpus)) KP_MODEL=$m KP_DEADLINE_S=${D:-240} \
    KP_CACHE=/tmp/kp_warmup_corpus/$m OUT=$OUT/$m timeout "${T:-580}" \
    python3 -u "$here/probe.py" > "$OUT/$m/log.txt" 2>&1; echo "fanout: $m rc=$?") &
  i=$((i + 1))
  [ $((i % gpus)) -eq 0 ] && wait
done
wait
python3 "$here/merge.py" "$OUT"
