#!/usr/bin/env bash
# PNG plots of the simulator experiments' figures from their CSVs (docs/simulator.md), run by
# `make sim`: plot_experiments.sh SIM_OUT_DIR. Needs gnuplot (Debian gnuplot-nox, installed by
# scripts/install-deps.sh); without it, prints a note and exits 0, so nothing else depends on it.
set -euo pipefail
out="${1:?usage: plot_experiments.sh SIM_OUT_DIR}"
if ! command -v gnuplot >/dev/null 2>&1; then
  echo "plot_experiments: gnuplot not found; skipping plots (scripts/install-deps.sh installs it)"
  exit 0
fi
term='set terminal pngcairo size 900,560 noenhanced font "sans,10"; set datafile separator ","'
plot() {  # plot NAME 'gnuplot commands'
  if gnuplot -e "$term; set output '$out/$1.png'; $2"; then echo "$out/$1.png"
  else echo "plot_experiments: $1 failed" >&2; fi
}
e1="$out/exp1_cluster"
if [ -f "$e1/exp1.csv" ]; then
  plot exp1_fraction_of_ideal "set title 'EXP-1: F = throughput per GPU at SLO / ideal offline benchmark'; \
    set style fill solid 0.6; set boxwidth 0.6; set yrange [0:1.1]; set ylabel 'F'; \
    set arrow from graph 0, first 0.75 to graph 1, first 0.75 nohead dt 2; \
    set arrow from graph 0, first 0.85 to graph 1, first 0.85 nohead dt 2; \
    plot '$e1/exp1.csv' every ::1 using 0:6:xtic(1) with boxes notitle, \
         '' every ::1 using 0:(\$6+0.03):(sprintf('%.3f', \$6)) with labels notitle"
  plot exp1_search "set title 'EXP-1: TPOT p90 along each policy bisection (SLO 50 ms)'; \
    set xlabel 'arrival rate (req/s)'; set ylabel 'TPOT p90 (ms)'; set key left top; \
    plot for [p in 'deepinfer random round_robin least_requests least_kv min_step_time'] \
      '$e1/search.csv' using (strcol(1) eq p ? \$3 : NaN):6 with points pt 7 title p"
fi
e2="$out/exp2_ttl"
if [ -f "$e2/hit_rate.csv" ]; then
  plot exp2_hit_vs_ttl "set title 'EXP-2: token-weighted hit rate vs TTL (same request stream)'; \
    set xlabel 'TTL (days)'; set ylabel 'hit rate'; set key bottom right; \
    plot '$e2/hit_rate.csv' using (strcol(4) eq 'chat' ? \$2 : NaN):7 with linespoints pt 7 title 'chat', \
         '' using (strcol(4) eq 'agent' ? \$3 : NaN):7 with linespoints pt 5 title 'agent'"
  plot exp2_daily "set title 'EXP-2: chat hit rate per day and TTL variant'; \
    set xlabel 'day'; set ylabel 'chat hit rate'; set key bottom right; \
    plot for [v=0:4] '$e2/hit_rate_daily.csv' using (strcol(3) eq 'chat' && \$2 == v ? \$1 : NaN):4 \
      with linespoints title sprintf('variant %d', v)"
fi
if [ -f "$out/exp2_checks/exp2_seeds.csv" ]; then
  plot exp2_seeds "set title 'EXP-2 (c): chat loss vs the 7 d TTL per seed'; set xlabel 'chat TTL (days)'; \
    set ylabel 'loss (points)'; set key top right; \
    plot '$out/exp2_checks/exp2_seeds.csv' every ::1 using 3:6:1 with points pt 7 lc variable \
      title 'one colour per seed'"
fi
for e in eplb_prefill_ep4 eplb_prefill_ep2 eplb_decode_ep64; do
  d="$out/$e"
  [ -f "$d/eplb_steps.csv" ] || continue
  plot "${e}" "set title '$e: moe_lb (max/mean expert load per rank) over steps'; \
    set xlabel 'step'; set ylabel 'moe_lb'; \
    plot '$d/eplb_steps.csv' using 1:2 with lines title 'no EPLB', '' using 1:3 with lines title 'EPLB'"
done
