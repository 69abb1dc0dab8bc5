#!/usr/bin/env bash
# Issue 13's whole H200 measurement in one device call (bench/README.md, "Trainer speed"): the device facts, then
# bench/gpu_sft.py four times, the targets that matter most first: full fine-tune on fixed lengths, full on
# variable lengths, then LoRA on each. One deadline (TOTAL_S) covers all four; each run may use its share of the
# time left (3:3:2:2), so a quick run leaves its time to the next and a slow one cannot starve the rest. Results
# go to $OUT (JSON lines appended as each training ends, so a run cut short keeps what it measured). Extra
# arguments go to every gpu_sft.py run (`--tiny` rehearses the whole call on a CPU). Time left over first
# measures what auto leaves off (BashGym's full fine-tune with Liger forced on beside torch.compile, into the same
# files), then the evaluator on the GPU (bench/gpu_eval_check.py), then the compile cold start
# (bench/compile_cold_start.py).
#
#   OUT=/tmp/out WHEELS=DIR bash bench/gpu_session.sh --tiny    # rehearsal here, under a minute
#   bash bench/gpu_session.sh                                   # on the GPU host, repository root, .whl carried
set -u
out=${OUT:?set OUT to the folder the results go to}
wheels=${WHEELS:-.whl}
if ! compgen -G "$wheels/*.whl" >/dev/null; then
    echo "no wheels in $wheels: download them first (bench/README.md, 'Trainer speed') and carry the folder" >&2
    exit 2
fi
deadline=$((SECONDS + ${TOTAL_S:-560}))
mkdir -p "$out"
{
    date -u +%FT%TZ
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || true
    python3 -c 'import sys, torch, transformers; print(sys.version.split()[0], torch.__version__, transformers.__version__, torch.cuda.is_available())'
    python3 -m pip list 2>/dev/null | grep -i -E '^(pyarrow|typing.extensions|triton|peft|accelerate|fsspec) ' || true
} >"$out/device.txt" 2>&1
cat "$out/device.txt"

export PYTHONUNBUFFERED=1
# Each recompilation of the compiled model is logged with its reason: how often packed rows recompile is one of
# the things only the GPU can show.
export TORCH_LOGS=${TORCH_LOGS:-recompiles}

run() {  # results file, method, its share, the shares still to come with it, gpu_sft.py arguments...
    local name=$1 method=$2 share=$3 shares=$4
    shift 4
    local left=$((deadline - SECONDS))
    local limit=$((left * share / shares))
    local log="$out/${name}_$method.log" started=$SECONDS before=0
    if [ "$limit" -lt 30 ]; then
        echo "$name $method: not run, ${left} s left of the session's deadline"
        return
    fi
    [ -f "$log" ] && before=$(grep -c 'Recompiling function' "$log")
    echo "=== gpu_sft.py --methods $method $*" >>"$log"  # appended: a later run of the same files keeps this one's
    timeout -k 10 "$limit" python3 bench/gpu_sft.py --wheels "$wheels" --methods "$method" --out "$out/$name.jsonl" \
        "$@" >>"$log" 2>&1
    local rc=$?
    echo "$name $method: exit $rc after $((SECONDS - started)) s of its ${limit}$([ "$rc" = 124 ] && echo ", cut there")"
    echo "$name $method: recompilations logged: $(($(grep -c 'Recompiling function' "$log") - before))"
    [ "$rc" = 0 ] || tail -n 15 "$log"
}

run gpu_sft full 3 10 "$@"
run gpu_sft_variable full 3 7 --variable-lengths "$@"
run gpu_sft lora 2 4 "$@"
run gpu_sft_variable lora 2 2 --variable-lengths "$@"
# Time to spare: what auto leaves off beside torch.compile, Liger's layer kernels (bench/README.md, "Liger beside
# torch.compile"), measured on the full fine-tune; its lines join gpu_sft.jsonl, its log gpu_sft_full.log.
if python3 -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
    echo "liger beside compile (BashGym full, liger=true):"
    run gpu_sft full 1 1 --trainers bashgym --set liger=true "$@"
else
    echo "liger beside compile: not run, Liger needs a CUDA GPU"
fi
# Time to spare: the evaluator's placement (bench/gpu_eval_check.py), about 20 s. Held-out rows evaluated where
# --device auto puts the tiny model (the GPU, bfloat16) against the CPU in float32; its line joins gpu_sft.jsonl.
if [ $((deadline - SECONDS)) -ge 60 ]; then
    HF_HUB_DISABLE_PROGRESS_BARS=1 timeout -k 10 90 python3 bench/gpu_eval_check.py --out "$out/gpu_sft.jsonl" \
        >/dev/null 2>>"$out/device.txt"
    echo "eval placement: exit $?"
else
    echo "eval placement: not run, $((deadline - SECONDS)) s left"
fi
grep -h -E '"check"|"trainer"|bashgym_over_trl' "$out"/gpu_sft*.jsonl 2>/dev/null

# Time to spare: compile cold start on the reference's shape, whole model against each layer (bench/README.md,
# "Compile cold start"). Its lines go to compile_cold_start.jsonl, its errors here: eight files in all.
left=$((deadline - SECONDS))
if [ "$left" -ge "${COLD_START_MIN_S:-120}" ]; then
    shape=()  # gpu_sft.py's shape: the reference, or --tiny where the session rehearses
    for arg in "$@"; do [ "$arg" = --tiny ] && shape=(--tiny --steps 1); done
    timeout -k 10 "$left" python3 bench/compile_cold_start.py "${shape[@]}" >"$out/compile_cold_start.jsonl"
    echo "compile_cold_start: exit $? with $left s to spare"
    cat "$out/compile_cold_start.jsonl"
else
    echo "compile_cold_start: not run, ${left} s left"
fi
