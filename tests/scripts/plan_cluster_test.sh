#!/usr/bin/env bash
# zs-plan's predictions against measurement on emulated nodes (tests/plan.cmake).
#
#   plan_cluster_test.sh CLUSTER_SIM ZS_MEMBENCH ZS_PLAN
#
# On scripts/cluster-sim's 2 hosts x 2 ranks, at each link rate (PLAN_RATES, Mbit/s;
# default "200 500": at 1 Gbit/s the 2 cores, not the link, decide hybrid stage 3's
# time, 0.76-1.47 of the prediction over many runs; docs/planning.md gives those figures),
# three zs-membench jobs one after another, each at PLAN_STEPS
# steps (4) on PLAN_MODEL (--units 1048576,1048576,1048576,1048576: 4 units of 1M
# fp32 parameters, 16 MiB, so that a step moves 17-48 MB over a host link and the
# link dominates; --model gpt ... takes PLAN_MEMBENCH_FLAGS=--no-compute), no compute:
#   stage 0      --stages 0
#   flat st. 3   --stages 3
#   hybrid st. 3 --stages 3 --shard-group 2 (a group per host)
# and zs-plan for the same model and cluster (--world 4 --ranks-per-node 2
# --inter-gbps RATE --intra-gbps PLAN_INTRA_GBPS: 20, what two ranks of one host
# move through shared memory here, zs-bench-comm -n 2 busbw 2.1-3.7 GB/s). Checks:
#   time    the measured communication time per step within PLAN_TOL (0.20) of
#           zs-plan's comm_s_per_step. zs-membench's step_min_s (each rank's
#           fastest step after the first, the most over ranks: the step the
#           shared CPUs slowed least; PLAN_STEP_KEY=step_s takes the mean of the
#           steps instead) holds, with no compute, the
#           collectives and what is not communication: the optimizer step on the
#           shard, copies, 4 ranks' threads on 2 cores (30-70 ms here, 3-20% of the
#           step). That part is measured in the same run on one emulated host of 4
#           ranks (no link; the faster of two runs), as its step time less zs-plan's
#           comm_s_per_step for that host (shared memory at PLAN_INTRA_GBPS), and
#           taken off:
#             measured comm = step(2 hosts) - (step(1 host) - predicted(1 host)).
#           The table gives the raw step / predicted too. A row outside the
#           tolerance runs again, up to PLAN_TRIES (3) times, and the fastest try
#           counts: the CPUs are shared (4 ranks on 2 cores, and whatever else
#           runs), and sharing only ever adds time to what the links take.
#   bytes   each host link's bytes each way (cluster-sim's shapers: frames) per step,
#           the whole job's over PLAN_STEPS (start-up adds some 0.1-0.5 MB), within
#           [0.995, 1.03] of zs-plan's inter_link_wire_bytes_per_step (the frames also carry
#           the acknowledgements of the other direction: 1.002 at 1 Gbit/s, 1.016 at 200); membench's
#           comm_inter_bytes_per_step (the engine's count across the replicas)
#           equal to zs-plan's replica_bytes_per_step
#   memory  rank 0's model_state_bytes equal to zs-plan's, exactly
# Two settings of the emulated hosts, each with a "default" to keep the machine's:
#   PLAN_TCP_FLAGS (send,inplace,need-ack,need-csum): Open MPI's btl_tcp_flags
#     without "put". With put, the TCP BTL sends the rest of a large message as
#     one fragment that holds the connection, and the rendezvous reply of the
#     opposite direction waits behind it, so two ranks sending to each other at
#     once (the linear all-gather, a ring of 2) take turns: 1x or 2x the link
#     time, varying from message to message.
#   PLAN_TCP_CC (cubic): each emulated host's route over its link uses this TCP
#     congestion control (ip route ... congctl, set by a wrapper around
#     zs-membench inside the host). cubic is Linux's default; this machine's is
#     bbr, under which Open MPI's all-gather (4 flows through one shaper) reached
#     0.88-0.91 of 200 Mbit/s where cubic reached 0.97.
# docs/planning.md has the figures with and without them.
# PLAN_REPS (1) repeats every row; the table at the end gives all of them.
# Whether the link decides: before the rows, at each rate, cluster_probe (next to
# zs-membench) loads the cluster as the rows' collectives do: each of host 0's 2
# ranks and its counterpart on host 1 send each other 16 MiB at once ("pairs":
# 4 ranks, both ways), and it reports how long a rank waited for a CPU meanwhile,
# on average. zs-plan models the links; where that wait is more than
# PLAN_CPU_BOUND (0.20) of the transfer in any of PLAN_PROBES (3) probes, the
# CPUs share in deciding the step time at that rate, and the time check there is
# printed, not failed (bytes and memory are checked all the same; its rows run
# once, as the tries are for the time check, and the probing stops at the first
# probe over the bound). On a 2-vCPU
# Xeon VM (December 2026) the pairs probe waited 0.18-0.22 of the transfer at
# 200 Mbit/s, where the rows measured 1.01-1.13 of the prediction, and 0.49-0.52
# at 500, where they measured 1.18-1.45. The probe used before, one rank
# sending to one (0.13 at 200 and 0.28 at 500 on an earlier VM, 0.15-0.35 at 500
# on this one), read under its bound of 0.20 at 500 in one CI run whose rows
# then failed: two ranks alone do not load the CPUs as four do.
# On a 2-vCPU AMD EPYC VM (December 2026, quiet) the pairs probe waited
# 0.10-0.12 at 200 Mbit/s (rows 1.00-1.08) and 0.22-0.32 at 500, where flat3 and
# hybrid3 measured 1.19-1.41 of the prediction in one run of three, so the bound
# is 0.20: at 500 Mbit/s on 2 CPUs the time is the CPUs' as much as the link's;
# under load (another build beside it) 200 Mbit/s read 0.29-0.34 and failed at 0.35.
#
# Exit 0 pass, 1 fail, 77 skipped (cluster-sim cannot make namespaces here).
set -uo pipefail

cluster_sim=${1:?path to scripts/cluster-sim}
membench=${2:?path to zs-membench}
plan=${3:?path to zs-plan}
rates=${PLAN_RATES:-200 500}
model=${PLAN_MODEL:---units 1048576,1048576,1048576,1048576}
mbflags=${PLAN_MEMBENCH_FLAGS:-}
steps=${PLAN_STEPS:-4}
stepkey=${PLAN_STEP_KEY:-step_min_s}
reps=${PLAN_REPS:-1}
intra=${PLAN_INTRA_GBPS:-20}
tol=${PLAN_TOL:-0.20}
cpu_bound=${PLAN_CPU_BOUND:-0.20}
probe=$(dirname "$membench")/cluster_probe
# PLAN_TIMING=0 (sanitized builds): bytes and memory only
tries=${PLAN_TRIES:-3}
probes=${PLAN_PROBES:-3}
[ "${PLAN_TIMING:-1}" = 0 ] && tries=1 # nothing to retry for
tcp_flags=${PLAN_TCP_FLAGS:-send,inplace,need-ack,need-csum}
tcp_cc=${PLAN_TCP_CC:-cubic}
[ "$tcp_flags" = default ] || export OMPI_MCA_btl_tcp_flags=$tcp_flags
wrap=()
if [ "$tcp_cc" != default ]; then
  if grep -qw "$tcp_cc" /proc/sys/net/ipv4/tcp_available_congestion_control 2>/dev/null; then
    # runs as each rank inside its host: the route to the other hosts, then zs-membench
    wrap=(sh -c 'ip route replace 10.77.0.0/24 dev zs0 proto kernel scope link congctl "$0" || exit 1; exec "$@"' "$tcp_cc")
  else
    echo "note: TCP congestion control $tcp_cc is not available here; the hosts keep the default" >&2
    tcp_cc=default
  fi
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/plan_cluster_test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
ok() { echo "ok: $*" >&2; }
calc() { awk "BEGIN { printf \"%.6g\", $1 }"; }
holds() { awk "BEGIN { exit !($1) }"; }
# field JSON_LINE KEY -> the number after "KEY":
field() { sed -n "s/.*\"$2\": \([-0-9.e+]*\).*/\1/p" <<<"$1" | head -1; }

# sim OUT_BASE MBIT [CLUSTER-SIM FLAGS --] ARGS...: zs-membench ARGS on 2 hosts x 2 ranks (or what
# the flags say) at MBIT; stdout in OUT_BASE.out, the links in OUT_BASE.json
sim() {
  local base=$1 mbit=$2 rc cs=(--hosts 2 --ranks-per-host 2)
  shift 2
  if [ "${1:-}" = --hosts ]; then cs=(); while [ "$1" != -- ]; do cs+=("$1"); shift; done; shift; fi
  bash "$cluster_sim" "${cs[@]}" --inter-mbps "$mbit" --timeout 120 --json "$base.json" -- \
    "${wrap[@]}" "$membench" $model $mbflags --steps "$steps" --json "$@" >"$base.out" 2>"$base.err"
  rc=$?
  if [ "$rc" = 77 ]; then cat "$base.err" >&2; echo "SKIP: cluster-sim cannot make namespaces here" >&2; exit 77; fi
  [ "$rc" = 0 ] || { tail -20 "$base.err" >&2; echo "FAIL: cluster-sim ... zs-membench $* exited $rc" >&2; exit 1; }
}
# link JSON H -> "tx rx"
link() { sed -n "s/.*\"host\": $2, \"tx_bytes\": \([0-9]*\), \"rx_bytes\": \([0-9]*\),.*/\1 \2/p" "$1"; }

# plan_opt JSON STAGE SHARD -> the option's line of zs-plan's JSON
plan_opt() {
  local hyb=false
  [ "$3" -lt 4 ] && hyb=true
  grep "{\"stage\": $2, \"shard_group\": $3, \"hybrid\": $hyb, \"offload\": false" "$1" | head -1
}

declare -A other
# baseline NAME STAGE SHARD ARGS...: the step's time outside communication, on one host of 4 ranks
baseline() {
  local name=$1 stage=$2 shard=$3 base opt step="" s try
  shift 3
  for try in 1 2; do # the faster of two, like the rows
    base=$tmp/$name-base-$rep-$try
    sim "$base" 1000 --hosts 1 --ranks-per-host 4 -- "$@"
    s=$(field "$(grep '{"stage": ' "$base.out" | head -1)" $stepkey)
    if [ -z "$step" ] || holds "$s < $step"; then step=$s; fi
  done
  opt=$(plan_opt "$tmp/plan1host.json" "$stage" "$shard")
  other[$name]=$(calc "$step - $(field "$opt" comm_s_per_step)")
  echo "$name on one host: step $step s, of which not communication ${other[$name]} s" >&2
}

rows=()
# row NAME MBIT STAGE SHARD ARGS...: one configuration at one rate, checked; adds to rows
row() {
  local name=$1 mbit=$2 stage=$3 shard=$4 base attempt res r0 opt step pred ratio raw comm mst pmst inter pinter wire
  shift 4
  opt=$(plan_opt "$tmp/plan$mbit.json" "$stage" "$shard")
  [ -n "$opt" ] || { fail "zs-plan gave no option for stage $stage shard group $shard"; return; }
  pred=$(field "$opt" comm_s_per_step)
  wire=$(field "$opt" inter_link_wire_bytes_per_step)
  local t s best="" n=$tries
  # the tries look for a run the shared CPUs did not slow: for the time check only
  [ -n "${cpu_decides[$mbit]:-}" ] && n=1
  for ((attempt = 1; attempt <= n; attempt++)); do
    base=$tmp/$name-$mbit-$rep-$attempt
    sim "$base" "$mbit" "$@"
    s=$(field "$(grep '{"stage": ' "$base.out" | head -1)" $stepkey)
    if [ -z "$best" ] || holds "$s < $(field "$(grep '{"stage": ' "$best.out" | head -1)" $stepkey)"; then best=$base; fi
    t=$(calc "($s - ${other[$name]}) / $pred")
    holds "$t >= 1 - $tol && $t <= 1 + $tol" && break
    ((attempt < n)) && echo "  $name at $mbit Mbit/s: measured/predicted $t: once more" >&2
  done
  base=$best  # the fastest try: the one the shared CPUs slowed least
  res=$(grep '{"stage": ' "$base.out" | head -1)
  r0=$(grep '{"rank": 0, ' "$base.out" | head -1)
  step=$(field "$res" $stepkey)
  comm=$(calc "$step - ${other[$name]}")
  ratio=$(calc "$comm / $pred")
  raw=$(calc "$step / $pred")
  echo "$name at $mbit Mbit/s: step $step s, communication $comm s, predicted $pred s, ratio $ratio (raw $raw)" >&2
  if [ "${PLAN_TIMING:-1}" = 0 ]; then
    echo "  $name $mbit Mbit/s: time not checked (PLAN_TIMING=0: a sanitized build, whose instrumented compute overlaps the communication that 'step - other' measures)" >&2
  elif [ -n "${cpu_decides[$mbit]:-}" ]; then
    echo "  $name $mbit Mbit/s: time not checked: ${cpu_decides[$mbit]}" >&2
  else
    holds "$ratio >= 1 - $tol && $ratio <= 1 + $tol" && ok "$name $mbit Mbit/s: time within $tol" ||
      fail "$name $mbit Mbit/s: measured $step s, predicted $pred s (ratio $ratio, outside 1 +- $tol)"
  fi
  mst=$(field "$r0" model_state_bytes)
  pmst=$(field "$opt" model_state_bytes)
  [ "$mst" = "$pmst" ] && ok "$name: model_state_bytes $mst = zs-plan's" ||
    fail "$name: model_state_bytes measured $mst, zs-plan $pmst"
  inter=$(field "$res" comm_inter_bytes_per_step)
  pinter=$(field "$opt" replica_bytes_per_step)
  holds "$inter == $pinter" && ok "$name: bytes across the replicas $inter = zs-plan's" ||
    fail "$name: comm_inter_bytes_per_step $inter, zs-plan replica_bytes_per_step $pinter"
  local h tx rx lr worst=""
  for h in 0 1; do
    read -r tx rx <<<"$(link "$base.json" $h)"
    for b in $tx $rx; do
      lr=$(calc "$b / $steps / $wire")
      worst="$worst $lr"
      holds "$lr >= 0.995 && $lr <= 1.03" ||
        fail "$name $mbit Mbit/s: host $h link carried $(calc "$b / $steps") bytes a step one way, zs-plan $wire (x$lr)"
    done
  done
  read -r tx rx <<<"$(link "$base.json" 0)"
  rows+=("$(printf '%-8s %5s %8.4f %8.4f %8.4f %8.4f %6.3f %6.3f %12.0f %12.0f %7.4f %10s' "$name" "$mbit" "$step" \
    "${other[$name]}" "$comm" "$pred" "$ratio" "$raw" "$(calc "$tx / $steps")" "$wire" "$(calc "$tx / $steps / $wire")" \
    "$mst")")
}

"$plan" $model --world 4 --ranks-per-node 4 --shard-group 2 --intra-gbps "$intra" --json \
  >"$tmp/plan1host.json" 2>/dev/null
for mbit in $rates; do
  "$plan" $model --world 4 --ranks-per-node 2 --inter-gbps "$(calc "$mbit / 1000")" --intra-gbps "$intra" \
    --json >"$tmp/plan$mbit.json" 2>/dev/null
done
for f in "$tmp"/plan*.json; do [ -s "$f" ] || { echo "FAIL: zs-plan gave no JSON ($f)" >&2; exit 1; }; done
declare -A cpu_decides
if [ "${PLAN_TIMING:-1}" != 0 ] && [ -x "$probe" ]; then
  for mbit in $rates; do
    most=""
    for ((p = 1; p <= probes; p++)); do
      line=$(bash "$cluster_sim" --hosts 2 --ranks-per-host 2 --inter-mbps "$mbit" --timeout 60 -- "$probe" 16777216 \
        pairs 2>/dev/null | grep '^pairs ')
      secs=$(sed -n 's/.* seconds=\([0-9.]*\).*/\1/p' <<<"$line")
      wait=$(sed -n 's/.* cpu_wait=\([0-9.]*\).*/\1/p' <<<"$line")
      if [ -z "$secs" ] || [ -z "$wait" ]; then
        echo "note: cluster_probe at $mbit Mbit/s gave no figures (probe $p)" >&2
        continue
      fi
      frac=$(calc "$wait / $secs")
      echo "probe $p at $mbit Mbit/s: 2 x 16 MiB each way in $secs s ($(calc "2 * 16777216 * 8 / $secs / 1e6") Mbit/s), a rank's CPU wait $wait s ($frac of it)" >&2
      if [ -z "$most" ] || holds "$frac > $most"; then most=$frac; fi
      holds "$most > $cpu_bound" && break # decided: more probes cannot lower the most
    done
    if [ -z "$most" ]; then
      echo "note: cluster_probe at $mbit Mbit/s gave no figures; the time is checked" >&2
      continue
    fi
    holds "$most > $cpu_bound" &&
      cpu_decides[$mbit]="a probe's ranks waited $most of its transfer for a CPU (more than $cpu_bound): the CPUs share in deciding here"
  done
fi
for ((rep = 1; rep <= reps; rep++)); do
  baseline stage0 0 4 --stages 0
  baseline flat3 3 4 --stages 3
  baseline hybrid3 3 2 --stages 3 --shard-group 2
  for mbit in $rates; do
    row stage0 "$mbit" 0 4 --stages 0
    row flat3 "$mbit" 3 4 --stages 3
    row hybrid3 "$mbit" 3 2 --stages 3 --shard-group 2
  done
done

{
  echo "zs-plan vs zs-membench on cluster-sim 2 hosts x 2 ranks, $model $mbflags, $steps steps," \
       "intra $intra Gbit/s, btl_tcp_flags ${OMPI_MCA_btl_tcp_flags:-default}, TCP congestion control $tcp_cc"
  echo "step: zs-membench $stepkey on 2 hosts; other: not communication (1 host); comm = step - other;" \
       "pred: zs-plan comm_s_per_step; raw = step / pred; link: host 0 tx per step (frames)"
  printf '%-8s %5s %8s %8s %8s %8s %6s %6s %12s %12s %7s %10s\n' config Mbit step other comm pred ratio raw \
    link_B pred_wire_B ratio model_st
  printf '%s\n' "${rows[@]}"
} >&2
((fails == 0)) || { echo "$fails check(s) failed" >&2; exit 1; }
echo "all checks passed" >&2
