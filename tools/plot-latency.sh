#!/usr/bin/env bash
# Latency against load, one line per setup, from summary CSVs written by
# troupe-bench --csv or troupe-sim --csv (several files are concatenated:
# one per rate, for instance). Needs gnuplot (tools/install-deps.sh --plots).
# Usage: tools/plot-latency.sh OUT.png METRIC TITLE FILE.csv...
#   METRIC: a column of the summary CSV, e.g. ttft_p50_s, ttft_p99_s, e2e_p99_s
set -euo pipefail
if [ $# -lt 4 ]; then
  echo "usage: $0 OUT.png METRIC TITLE FILE.csv..." >&2
  exit 2
fi
out=$1 metric=$2 title=$3
shift 3
if ! command -v gnuplot > /dev/null; then
  echo "plot-latency: gnuplot is missing: run tools/install-deps.sh --plots" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# One data file per label: offered_rate and the metric, sorted by rate.
awk -F, -v metric="$metric" -v dir="$work" '
  FNR == 1 { for (i = 1; i <= NF; ++i) col[$i] = i; if (!(metric in col)) { print "no column " metric > "/dev/stderr"; exit 1 } next }
  { f = dir "/" $col["label"] ".dat"; gsub(/[^A-Za-z0-9_.:\/-]/, "_", f); print $col["offered_rate"], $col[metric] >> f; labels[f] = $col["label"] }
  END { for (f in labels) print f "\t" labels[f] > (dir "/labels") }
' "$@"
plots=""
while IFS=$'\t' read -r file label; do
  sort -g "$file" -o "$file"
  plots+="${plots:+, }'$file' using 1:2 with linespoints title '$label'"
done < <(sort "$work/labels")
gnuplot <<GP
set terminal png size 900,560 noenhanced
set output '$out'
set title '$title'
set xlabel 'offered load (requests/s)'
set ylabel '$metric'
set logscale y
set grid
set key top left
plot $plots
GP
echo "plot-latency: wrote $out"
